"""CutOut as pure functions: zero square holes, one position per image, on the device (or in a PIL image)."""

from __future__ import annotations

from typing import Any

import torch

from cadence.ops.checks import check_bool, check_int, check_number
from cadence.ops.pil import is_pil_image, pil_to_tensor, tensor_to_pil

__all__ = ["check_cutout_args", "cutout_batch"]


def check_cutout_args(num_holes: int, length: float, uniform_sampling: bool) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_int("num_holes", num_holes, ge=1, hint="holes cut from each image")
    check_number("length", length, gt=0, le=1, hint="the hole side as a fraction of min(H, W)")
    check_bool("uniform_sampling", uniform_sampling)


def cutout_batch(
    input: Any,
    num_holes: int = 1,
    length: float = 0.5,
    uniform_sampling: bool = False,
    *,
    generator: torch.Generator | None = None,
) -> Any:
    """Set `num_holes` square holes to zero in every image, each image with its own positions.

    The network cannot rely on any single region of an object, which regularises it like
    dropout on the input (DeVries & Taylor, 2017). Positions are drawn per image, as in the
    paper (Composer cuts the same box from every image of the batch); the masks are built
    from the per-image coordinates by broadcasting, so there is no loop over images.

    Args:
        input: images ``(N, C, H, W)``, one image ``(C, H, W)`` (any dtype, device or memory format),
            or a PIL image (8 bits per band, e.g. 'L' or 'RGB'), as Composer accepts.
        num_holes: holes per image; they may overlap.
        length: side of a hole as a fraction of ``min(H, W)``: ``int(min(H, W) * length)`` pixels,
            clipped where the hole crosses the border. In (0, 1].
        uniform_sampling: False (the paper): the hole's centre is uniform over the image, so pixels
            near the border are masked less often. True: the hole's top-left corner is uniform over
            every position where the hole still overlaps the image, so every pixel is equally likely
            to be masked.
        generator: draws the positions (the global RNG when None); it must live on ``input``'s device.

    Returns:
        A new tensor like `input` (dtype, device, memory format), or a new PIL image of the same mode,
        with the holes set to 0.
    """
    check_cutout_args(num_holes, length, uniform_sampling)
    if is_pil_image(input):
        holes = cutout_batch(pil_to_tensor(input), num_holes, length, uniform_sampling, generator=generator)
        return tensor_to_pil(holes, input.mode)
    if not isinstance(input, torch.Tensor) or input.ndim not in (3, 4):
        shape = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise TypeError(f"`input` must be a (N, C, H, W) or (C, H, W) tensor or a PIL image, got {shape}")
    images = input.unsqueeze(0) if input.ndim == 3 else input
    num_images, _, height, width = images.shape
    side = int(min(height, width) * length)
    if side == 0:
        return input.clone()
    shape = (num_images, num_holes)
    top = _draw_starts(shape, height, side, uniform_sampling, generator, input.device)
    left = _draw_starts(shape, width, side, uniform_sampling, generator, input.device)
    holes = _hole_mask(top, left, side, height, width).unsqueeze(1)  # (N, 1, H, W)
    out = torch.where(holes, torch.zeros((), dtype=input.dtype, device=input.device), images)
    return out.squeeze(0) if input.ndim == 3 else out


def _draw_starts(
    shape: tuple[int, int],
    size: int,
    side: int,
    uniform_sampling: bool,
    generator: torch.Generator | None,
    device: torch.device,
) -> torch.Tensor:
    """First row (or column) of each hole; may be negative or run past the border (clipped later)."""
    if uniform_sampling:  # every start that overlaps the image: each pixel is covered by `side` of them
        return torch.randint(-(side - 1), size, shape, generator=generator, device=device)
    centre = torch.randint(0, size, shape, generator=generator, device=device)
    return centre - side // 2


def _hole_mask(top: torch.Tensor, left: torch.Tensor, side: int, height: int, width: int) -> torch.Tensor:
    """``(N, H, W)`` bool mask, True inside any of the ``(N, K)`` holes; clipping is implicit."""
    rows = torch.arange(height, device=top.device)
    cols = torch.arange(width, device=top.device)
    in_rows = (rows >= top[..., None]) & (rows < top[..., None] + side)  # (N, K, H)
    in_cols = (cols >= left[..., None]) & (cols < left[..., None] + side)  # (N, K, W)
    return (in_rows[..., :, None] & in_cols[..., None, :]).any(dim=1)
