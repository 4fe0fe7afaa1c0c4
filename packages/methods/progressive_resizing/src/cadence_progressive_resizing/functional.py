"""Progressive Resizing as pure functions: the size schedule, and shrinking a batch by crop or resize."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from cadence.ops.checks import check_bool, check_choice, check_int, check_number

__all__ = ["check_interpolation", "check_resizing_args", "progressive_resizing_scale", "resize_batch"]

_MODES = ("resize", "crop")
_INTERPOLATIONS = ("nearest", "bilinear")


def check_interpolation(interpolation: str) -> str:
    """`interpolation` if it is 'nearest' (Composer's) or 'bilinear' (antialiased), else a ValueError."""
    return check_choice("interpolation", interpolation, _INTERPOLATIONS)


def check_resizing_args(
    mode: str, initial_scale: float, finetune_fraction: float, delay_fraction: float, size_increment: int
) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_choice("mode", mode, _MODES)
    check_number("initial_scale", initial_scale, gt=0, le=1, hint="the first scale, as a fraction of the full size")
    check_number("finetune_fraction", finetune_fraction, ge=0, le=1, hint="the last part of training, at full size")
    check_number("delay_fraction", delay_fraction, ge=0, le=1, hint="the first part of training, at initial_scale")
    if delay_fraction + finetune_fraction > 1:
        raise ValueError(
            f"`delay_fraction` + `finetune_fraction` = {delay_fraction} + {finetune_fraction} must be <= 1 "
            "(the ramp happens between the two)"
        )
    check_int("size_increment", size_increment, ge=1, hint="sizes are multiples of it")


def progressive_resizing_scale(
    elapsed: float,
    width: int,
    initial_scale: float = 0.5,
    finetune_fraction: float = 0.2,
    delay_fraction: float = 0.5,
    size_increment: int = 4,
) -> float:
    """The scale to train at after `elapsed` (fraction of training), pinned to whole size increments.

    ``initial_scale`` until ``delay_fraction``, then linear up to 1 at ``1 - finetune_fraction``,
    then 1. The width ``round(width * scale / size_increment) * size_increment`` (at least one
    increment, at most `width`) keeps the number of distinct shapes small (cuDNN autotuning and
    ``torch.compile`` see each shape once); the scale returned is that width over `width`.
    """
    check_resizing_args("resize", initial_scale, finetune_fraction, delay_fraction, size_increment)
    check_number("elapsed", elapsed, ge=0, hint="the fraction of training done, from 0 to 1")
    check_int("width", width, ge=1, hint="the full width of the images, in pixels")
    ramp = 1 - finetune_fraction - delay_fraction
    if elapsed < delay_fraction:
        fraction = 0.0
    else:
        fraction = min((elapsed - delay_fraction) / ramp, 1.0) if ramp > 0 else 1.0
    scale = initial_scale + (1 - initial_scale) * fraction
    pinned = round(width * scale / size_increment) * size_increment
    return min(max(pinned, min(size_increment, width)), width) / width


def resize_batch(
    input: torch.Tensor,
    target: torch.Tensor | None,
    scale_factor: float,
    mode: str = "resize",
    resize_targets: bool = False,
    *,
    interpolation: str = "nearest",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Shrink a batch of images (and, optionally, dense targets) to ``int(scale_factor * size)``.

    Args:
        input: images ``(N, C, H, W)``; any device, dtype or memory format (all kept).
        target: returned as is unless `resize_targets`; then a mask ``(N, H', W')`` or ``(N, C', H', W')``.
        scale_factor: the new size over the old; ``>= 1`` returns `input` and `target` themselves.
        mode: 'resize' interpolates (see `interpolation`); 'crop' takes one random crop, the same
            for the whole batch.
        resize_targets: shrink the target the same way (segmentation).
        interpolation: how 'resize' samples. 'nearest' (default) is Composer's: nearest neighbour at
            `scale_factor` (``F.interpolate(..., scale_factor=s, mode='nearest')``), the same image for
            the same call, images and targets alike; it skips pixels, so fine detail aliases.
            'bilinear' is antialiased bilinear (every source pixel contributes, as PIL's resize),
            smoother but several times the cost of 'nearest'; targets then take
            'nearest-exact' (centred like the images, classes never blended).
        generator: draws the crop position (the global RNG when None); on the input's device.

    Returns:
        ``(input, target)`` resized.
    """
    check_choice("mode", mode, _MODES)
    check_number("scale_factor", scale_factor, gt=0)
    check_bool("resize_targets", resize_targets)
    check_interpolation(interpolation)
    if not isinstance(input, torch.Tensor) or input.ndim != 4:
        raise ValueError(f"`input` must be an (N, C, H, W) tensor, got {getattr(input, 'shape', type(input))}")
    dense = _target_to_resize(target, resize_targets)
    if scale_factor >= 1:
        return input, target
    if mode == "crop":
        new_input, new_dense = _crop(input, dense, scale_factor, generator)
    else:
        new_input = _interpolate(input, scale_factor, interpolation)
        target_mode = "nearest" if interpolation == "nearest" else "nearest-exact"
        new_dense = None if dense is None else _interpolate(dense, scale_factor, target_mode)
    return new_input, (target if new_dense is None else new_dense)


def _target_to_resize(target: torch.Tensor | None, resize_targets: bool) -> torch.Tensor | None:
    """`target` when it is resized with the images (a mask, checked), else None."""
    if not resize_targets:
        return None
    if not isinstance(target, torch.Tensor) or target.ndim not in (3, 4):
        raise ValueError("`resize_targets`=True needs a (N, H, W) or (N, C, H, W) target tensor")
    return target


def _size(size: int, scale: float) -> int:
    return max(1, math.floor(size * scale + 1e-9))  # int(scale * size), robust to scale = k / size rounding


def _interpolate(x: torch.Tensor, scale: float, mode: str) -> torch.Tensor:
    images = x.unsqueeze(1) if x.ndim == 3 else x
    size = (_size(images.shape[-2], scale), _size(images.shape[-1], scale))
    work = images if images.is_floating_point() else images.float()
    if mode == "bilinear":
        out = F.interpolate(work, size=size, mode="bilinear", align_corners=False, antialias=True)
    elif mode == "nearest" and size == tuple(math.floor(n * scale) for n in images.shape[-2:]):
        # Composer's call, so the same pixels are picked (they depend on passing the scale, not the size)
        out = F.interpolate(work, scale_factor=scale, mode="nearest", recompute_scale_factor=False)
    else:  # nearest-exact, or a scale k / n that floating point puts just below k (Composer: k - 1 pixels)
        out = F.interpolate(work, size=size, mode=mode)
    if not images.is_floating_point():
        out = out.round().to(images.dtype)
    out = _same_format(out, images)
    return out.squeeze(1) if x.ndim == 3 else out


def _crop(
    input: torch.Tensor, target: torch.Tensor | None, scale: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One crop for the whole batch (and `target`, unless None); its offsets stay on the device (no host sync)."""
    height, width = input.shape[-2:]
    crop_h, crop_w = _size(height, scale), _size(width, scale)
    device = input.device
    top = torch.randint(0, height - crop_h + 1, (), generator=generator, device=device)
    left = torch.randint(0, width - crop_w + 1, (), generator=generator, device=device)
    new_input = _same_format(_take(input, top, left, crop_h, crop_w), input)
    if target is None:
        return new_input, None
    t_height, t_width = target.shape[-2:]  # the same region, in the target's own resolution
    t_top, t_left = top * t_height // height, left * t_width // width
    new_target = _take(target, t_top, t_left, _size(t_height, scale), _size(t_width, scale))
    return new_input, _same_format(new_target, target)


def _take(x: torch.Tensor, top: torch.Tensor, left: torch.Tensor, height: int, width: int) -> torch.Tensor:
    rows = top + torch.arange(height, device=x.device)
    cols = left + torch.arange(width, device=x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


def _same_format(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """channels_last in, channels_last out (interpolate and index_select may not keep it)."""
    if like.ndim == 4 and like.is_contiguous(memory_format=torch.channels_last) and not like.is_contiguous():
        return out.contiguous(memory_format=torch.channels_last)
    return out
