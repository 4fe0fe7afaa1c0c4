"""Image augmentation primitives shared by RandAugment and AugMix: batched, per-sample, on device.

The operations and their severity-to-magnitude mapping follow Composer's
``augmentation_primitives`` (itself adapted from the AugMix reference code), which act on one
PIL image at a time. Here every primitive takes a float NCHW batch in *pixel units* (values in
[0, 255], so uint8 data is represented exactly) and one parameter per sample, and each
parameter has an identity value that leaves its sample exactly unchanged. Geometric operations
(rotate, shear, translate) are per-sample 2x3 affine matrices in PIL's convention, applied with
one ``grid_sample``; colour operations blend with a degenerate image (factor 1 = identity); the
point operations (autocontrast, equalize, posterize, solarize) use per-sample-channel statistics
(equalize: batched histograms).

`draw_ops` gives every sample its own operation and magnitude at every step; `apply_ops` runs
the steps in one of two ways with the same result. Dense (for accelerators): every primitive
runs on the whole batch, each sample getting identity parameters for the operations it did not
draw; no per-sample Python loop, and nothing reads a device value on the host, so it never
synchronises. Grouped (for CPU, where reading a value costs nothing): samples are sorted by
operation and each primitive runs on its own samples only, a fraction of the dense path's work.
`augment_image` is the per-image reference: only the drawn primitive runs.

Torch only: PIL is imported lazily, and only when a PIL image is passed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "OPS",
    "add_dataset_transform",
    "affine_matrix",
    "apply_op_parameters",
    "apply_ops",
    "augment_batch",
    "augment_image",
    "augmentation_sets",
    "autocontrast",
    "brightness",
    "color",
    "contrast",
    "draw_ops",
    "equalize",
    "op_magnitudes",
    "pil_to_tensor",
    "posterize",
    "primitive_parameters",
    "random_uniform",
    "resolve_augmentation_set",
    "sharpness",
    "solarize",
    "tensor_to_pil",
    "to_pixels",
    "warp_affine",
]

#: Every operation, in a fixed order (the index is the op id used by the batched path).
OPS: tuple[str, ...] = (
    "autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y",
    "translate_x", "translate_y", "color", "contrast", "brightness", "sharpness",
    "color_original", "contrast_original", "brightness_original", "sharpness_original",
)  # fmt: skip

_SAFE = ("autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y",
         "translate_x", "translate_y")  # fmt: skip

#: The operation sets of Composer. 'safe' leaves out the four colour operations, which overlap
#: ImageNet-C/CIFAR-10-C corruptions (AugMix paper); 'original' uses the AugMix reference
#: code's magnitudes for those four; 'all' uses Composer's symmetric magnitudes.
augmentation_sets: dict[str, tuple[str, ...]] = {
    "all": (*_SAFE, "color", "contrast", "brightness", "sharpness"),
    "safe": _SAFE,
    "original": (*_SAFE, "color_original", "contrast_original", "brightness_original", "sharpness_original"),
}

# Which primitive each op drives, and the parameter value that leaves a sample unchanged.
_PRIMITIVE = {op: op.removesuffix("_original") for op in OPS} | dict.fromkeys(
    ("rotate", "shear_x", "shear_y", "translate_x", "translate_y"), "affine"
)
_IDENTITY = {"autocontrast": 0.0, "equalize": 0.0, "posterize": 8.0, "solarize": 256.0, "color": 1.0,
             "contrast": 1.0, "brightness": 1.0, "sharpness": 1.0}  # fmt: skip
_APPLY_ORDER = ("affine", "color", "contrast", "brightness", "sharpness", "autocontrast", "equalize",
                "posterize", "solarize")  # fmt: skip


def resolve_augmentation_set(augmentation_set: str | Sequence[str]) -> tuple[str, ...]:
    """Op names from a set name ('all', 'safe', 'original') or a sequence of op names."""
    if isinstance(augmentation_set, str):
        if augmentation_set not in augmentation_sets:
            raise ValueError(
                f"`augmentation_set`={augmentation_set!r} is not a known set; use one of {sorted(augmentation_sets)}"
            )
        return augmentation_sets[augmentation_set]
    ops = tuple(augmentation_set)
    unknown = [op for op in ops if not isinstance(op, str) or op not in OPS]
    if not ops or unknown:
        raise ValueError(
            f"`augmentation_set` must be a set name or a non-empty sequence of op names from {OPS}; "
            f"got unknown entries {unknown!r}"
            if ops
            else "`augmentation_set` is empty; use e.g. 'all'"
        )
    return ops


# Primitives ------------------------------------------------------------------------------------
# Each takes ``images`` (N, C, H, W) float in pixel units and one parameter per sample. Per-sample
# choices use ``torch.lerp`` (exact at weights 0 and 1) rather than ``torch.where`` on image-sized
# masks, which is several times slower on CPU.


@functools.lru_cache(maxsize=128)
def _constant(values: tuple[Any, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor made once per device (never modify it). Made from Python data at
    every call, it would be copied from the host each time, which synchronises an accelerator."""
    return torch.tensor(values, dtype=dtype, device=device)


def _per_sample(value: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    return value.to(device=images.device, dtype=images.dtype).view(-1, 1, 1, 1)


def _choose(on: torch.Tensor, changed: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """`changed` for samples with ``on == 1``, `images` for ``on == 0`` (both exactly)."""
    return torch.lerp(images, changed, on)


def _blend(images: torch.Tensor, degenerate: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ``Image.blend(degenerate, image, factor)``, clipped; factor 1 returns `images` exactly."""
    return torch.lerp(degenerate, images, _per_sample(factor, images)).clamp_(0, 255)


def _gray(images: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma (PIL's ``convert('L')``), shape (N, 1, H, W)."""
    if images.shape[1] == 1:
        return images
    luma = _constant((0.299, 0.587, 0.114), images.dtype, images.device).view(1, 3, 1, 1)
    return (images * luma).sum(dim=1, keepdim=True)


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Brightness``: blend with black."""
    return (images * _per_sample(factor, images)).clamp_(0, 255)


def color(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Color``: blend with the grayscale image (factor 0 = grayscale)."""
    return _blend(images, _gray(images), factor)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Contrast``: blend with the mean gray level of each image."""
    return _blend(images, _gray(images).mean(dim=(1, 2, 3), keepdim=True), factor)


def _smooth(images: torch.Tensor) -> torch.Tensor:
    """PIL's SMOOTH filter, [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, on the interior; border pixels kept."""
    if images.shape[-2] < 3 or images.shape[-1] < 3:
        return images
    # (3x3 box sum + 4 x centre) / 13, by shifted adds (a one-channel conv2d is slow on CPU)
    rows = images[..., :-2, :] + images[..., 1:-1, :] + images[..., 2:, :]
    box = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]
    smooth = images.clone()
    smooth[..., 1:-1, 1:-1] = (box + 4 * images[..., 1:-1, 1:-1]) / 13
    return smooth


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Sharpness``: blend with PIL's SMOOTH filter (factor 0 = smoothed)."""
    return _blend(images, _smooth(images), factor)


def autocontrast(images: torch.Tensor, enabled: torch.Tensor) -> torch.Tensor:
    """``ImageOps.autocontrast``: stretch each channel to [0, 255] where `enabled` is nonzero."""
    low, high = images.amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)
    stretch = (high > low) & (_per_sample(enabled, images) != 0)
    scale = torch.where(stretch, 255 / (high - low).clamp_min(1e-12), 1.0)
    return ((images - torch.where(stretch, low, 0.0)) * scale).clamp_(0, 255)


def equalize(images: torch.Tensor, enabled: torch.Tensor) -> torch.Tensor:
    """``ImageOps.equalize`` per channel (on the 8-bit levels) where `enabled` is nonzero."""
    n, c, h, w = images.shape
    levels = images.round().clamp_(0, 255).long().view(n * c, h * w)
    ones = torch.ones((), dtype=images.dtype, device=images.device).expand(levels.shape)
    hist = torch.zeros(n * c, 256, dtype=images.dtype, device=images.device).scatter_add_(1, levels, ones)
    bins = torch.arange(256, dtype=images.dtype, device=images.device)
    last = torch.where(hist > 0, bins, 0).argmax(dim=1, keepdim=True)  # the highest level present
    step = torch.div(h * w - hist.gather(1, last), 255, rounding_mode="floor")
    below = hist.cumsum(1) - hist  # pixels below each level
    lut = torch.div(torch.div(step, 2, rounding_mode="floor") + below, step.clamp_min(1), rounding_mode="floor")
    lut = torch.where(step > 0, lut.clamp_(0, 255), bins)  # one level only: unchanged (as PIL)
    return _choose(_per_sample(enabled, images), lut.gather(1, levels).view(n, c, h, w), images)


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """``ImageOps.posterize``: keep the top `bits` bits of each level (8 = unchanged)."""
    bits = _per_sample(bits, images)
    quantum = torch.exp2(8 - bits)
    return _choose((bits < 8).to(images.dtype), torch.floor(images / quantum) * quantum, images)


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """``ImageOps.solarize``: invert levels at or above `threshold` (256 = unchanged).

    A float level counts as its nearest 8-bit level, so it is inverted from ``threshold - 0.5``.
    """
    above = torch.sign(images - (_per_sample(threshold, images) - 0.5)) + 1  # 2 above, 0 below
    return torch.addcmul(images, above, 127.5 - images)  # x + (255 - 2x) where above


@functools.lru_cache(maxsize=16)
def _pixel_centres(height: int, width: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(2, 1, H * W): PIL coordinates ``x + 0.5`` and ``y + 0.5`` of every output pixel."""
    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=dtype, device=device) + 0.5,
        torch.arange(width, dtype=dtype, device=device) + 0.5,
        indexing="ij",
    )
    return torch.stack([xs.flatten(), ys.flatten()]).unsqueeze(1)


def warp_affine(images: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """PIL's ``Image.transform(size, AFFINE, matrix, BILINEAR)`` for every sample at once.

    ``matrix`` (N, 2, 3) maps an output point to the input point it samples, in pixel units with
    the origin at the top-left corner (PIL's convention). As in PIL, points outside the image read
    0 and bilinear neighbours beyond the edge are clamped. Identity matrices return their samples
    exactly.
    """
    n, _, h, w = images.shape
    m = matrix.to(device=images.device, dtype=images.dtype)
    # the map into grid_sample's coordinates (align_corners=False: -1 and 1 are the outer edges)
    scale = _constant(((2 / w,), (2 / h,)), m.dtype, m.device)
    normal = m * scale - _constant((0.0, 0.0, 1.0), m.dtype, m.device)
    x, y = _pixel_centres(h, w, m.dtype, m.device)
    grid = torch.addcmul(torch.addcmul(normal[..., 2:], x, normal[..., :1]), y, normal[..., 1:2])  # (N, 2, H * W)
    warped = F.grid_sample(
        images,
        grid.transpose(1, 2).contiguous().view(n, h, w, 2),
        mode="bilinear",
        padding_mode="border",
        align_corners=False,
    )
    # 1 inside the image, 0 outside (the ramp between is 1e-7 of the image wide)
    reach = torch.maximum(grid[:, 0].abs(), grid[:, 1].abs())
    inside = (1 - reach).mul_(1e7).add_(1).clamp_(0, 1).view(n, 1, h, w)
    identity = (m == torch.eye(2, 3, dtype=m.dtype, device=m.device)).flatten(1).all(dim=1).view(n, 1, 1, 1)
    return _choose(identity.to(images.dtype), images, warped * inside)


def affine_matrix(op_ids: torch.Tensor | str, values: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """PIL matrices (N, 2, 3) of geometric ops: rotate (degrees, counter-clockwise about the centre,
    as ``Image.rotate``), shear_x/shear_y (factor), translate_x/translate_y (pixels). Samples whose op
    (an op name, or op ids into `OPS`) is not geometric get the identity."""
    if isinstance(op_ids, str):
        op_ids = torch.full(values.shape, OPS.index(op_ids), device=values.device)

    def pick(op: str) -> torch.Tensor:
        return torch.where(op_ids == OPS.index(op), values, 0.0)

    angle = pick("rotate") * (-math.pi / 180)
    cos, sin = torch.cos(angle), torch.sin(angle)
    cx, cy = width / 2, height / 2
    rows = (cos, sin + pick("shear_x"), cx - cos * cx - sin * cy + pick("translate_x"),
            pick("shear_y") - sin, cos, cy + sin * cx - cos * cy + pick("translate_y"))  # fmt: skip
    return torch.stack(rows, dim=-1).view(-1, 2, 3)


_PRIMITIVES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "affine": warp_affine, "color": color, "contrast": contrast, "brightness": brightness,
    "sharpness": sharpness, "autocontrast": autocontrast, "equalize": equalize, "posterize": posterize,
    "solarize": solarize,
}  # fmt: skip


# Random parameters -------------------------------------------------------------------------------
# Composer's magnitudes, with level ~ U[0.1, severity): posterize keeps 4 - floor(0.4 level) bits;
# solarize's threshold is 256 - floor(25.6 level); rotate floor(3 level) degrees, shear 0.03 level,
# translate floor(level side / 30) pixels, each with a random sign; the '_original' enhancement
# factors are 0.18 level + 0.1; the others are U[1, severity) or U[1 - 0.09 severity, 1) with
# probability 1/2 each, and brightening factors are scaled by 0.75. Each op is one row of
# (scale, floored, multiplier, random sign, offset, enhancement) so that every sample's magnitude
# comes out of one vectorised expression.


@functools.lru_cache(maxsize=64)
def _magnitude_table(device: torch.device, height: int, width: int) -> torch.Tensor:
    rows = {
        "autocontrast": (0, 0, 0, 0, 1, 0), "equalize": (0, 0, 0, 0, 1, 0),
        "posterize": (0.4, 1, -1, 0, 4, 0), "solarize": (25.6, 1, -1, 0, 256, 0),
        "rotate": (3, 1, 1, 1, 0, 0), "shear_x": (0.03, 0, 1, 1, 0, 0), "shear_y": (0.03, 0, 1, 1, 0, 0),
        "translate_x": (width / 30, 1, 1, 1, 0, 0), "translate_y": (height / 30, 1, 1, 1, 0, 0),
        "color": (0, 0, 0, 0, 0, 1), "contrast": (0, 0, 0, 0, 0, 1), "sharpness": (0, 0, 0, 0, 0, 1),
        "brightness": (0, 0, 0, 0, 0, 2),
    }  # fmt: skip
    original = (0.18, 0, 1, 0, 0.1, 0)
    table = [rows.get(op, original) for op in OPS] + [(0, 0, 0, 0, 0, 0)]  # last row: op id -1
    return torch.tensor(table, dtype=torch.float32, device=device)


def op_magnitudes(
    op_ids: torch.Tensor, uniforms: torch.Tensor, severity: float, height: int, width: int
) -> torch.Tensor:
    """The magnitude of each sample's op: degrees, shear, pixels, bits, threshold or factor.

    Args:
        op_ids: (N,) index into `OPS` of each sample's op; -1 = no op (magnitude 0).
        uniforms: (N, 4) uniforms in [0, 1) from which the magnitudes are drawn.
        severity: Composer's severity (1-10).
        height, width: image size (translations are a fraction of it).
    """
    scale, floored, multiplier, signed, offset, enhance = _magnitude_table(op_ids.device, height, width)[op_ids].T
    level = 0.1 + uniforms[:, 0] * (severity - 0.1)
    raw = level * scale
    sign = torch.where((signed > 0) & (uniforms[:, 1] > 0.5), -1.0, 1.0)
    value = offset + torch.where(floored > 0, raw.floor(), raw) * multiplier * sign
    factor = torch.where(
        uniforms[:, 2] > 0.5, 1 + uniforms[:, 3] * (severity - 1), 1 - 0.09 * severity * (1 - uniforms[:, 3])
    )
    factor = torch.where((enhance == 2) & (factor > 1), 0.75 * factor, factor)
    return torch.where(enhance > 0, factor, value)


# primitive (index into _APPLY_ORDER) of each op id; the extra last entry (op id -1) means "no op"
_GROUP_OF_OP = (*(_APPLY_ORDER.index(_PRIMITIVE[op]) for op in OPS), len(_APPLY_ORDER))


def primitive_parameters(
    op_ids: torch.Tensor, values: torch.Tensor, height: int, width: int, ops: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Each primitive's per-sample parameter (identity for samples that drew another op), for the
    primitives `ops` use. `values` are `op_magnitudes`."""
    groups = _constant(_GROUP_OF_OP, torch.long, op_ids.device)[op_ids]
    params = {}
    for key in dict.fromkeys(_PRIMITIVE[op] for op in ops):
        if key == "affine":
            params[key] = affine_matrix(op_ids, values, height, width)
        else:
            params[key] = torch.where(groups == _APPLY_ORDER.index(key), values, _IDENTITY[key])
    return params


def apply_op_parameters(images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Run every primitive in `params` on the batch; each sample changes only by the op it chose."""
    for key in _APPLY_ORDER:
        if key in params:
            images = _PRIMITIVES[key](images, params[key])
    return images


def _apply_grouped(images: torch.Tensor, op_ids: torch.Tensor, values: torch.Tensor, quantize: bool) -> torch.Tensor:
    """`apply_ops` with each primitive run on its own samples only. Writes into `images`. Reads the
    group sizes on the host, so it is free of synchronisation only on CPU."""
    steps, n = op_ids.shape
    _, _, h, w = images.shape
    width = len(_GROUP_OF_OP)
    matrices = affine_matrix(op_ids.flatten(), values.flatten(), h, w).view(steps, n, 2, 3)
    groups = _constant(_GROUP_OF_OP, torch.long, op_ids.device)[op_ids]
    order = torch.argsort(groups, dim=1, stable=True)
    offsets = torch.arange(steps, device=groups.device).view(-1, 1) * width
    sizes = torch.bincount((groups + offsets).flatten(), minlength=steps * width).view(steps, width).tolist()
    for step in range(steps):
        start = 0
        for key, size in zip(_APPLY_ORDER, sizes[step]):  # the last group (no op) stays as it is
            if size:
                members = order[step, start : start + size]
                value = (matrices if key == "affine" else values)[step].index_select(0, members)
                changed = _PRIMITIVES[key](images.index_select(0, members), value)
                images.index_copy_(0, members, changed.round_() if quantize else changed)
                start += size
    return images


def _draw_device(generator: torch.Generator | None, device: torch.device) -> torch.device:
    return generator.device if generator is not None else device


def random_uniform(shape: Sequence[int], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Uniforms drawn on the generator's device (the default RNG's when None), moved to `device`."""
    return torch.rand(tuple(shape), generator=generator, device=_draw_device(generator, device)).to(device)


_CPU_BLOCK_BYTES = 1 << 20  # about a core's L2 cache


def draw_ops(
    n: int,
    ops: Sequence[str],
    severity: float,
    steps: int,
    size: tuple[int, int],
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ops for `n` samples: (steps, n) op ids into `OPS` and their (steps, n) magnitudes.

    Every sample draws its op uniformly from `ops` at every step. Draws happen on the generator's
    device (the default RNG's when None) and land on `device`. `size` is the images' (H, W).
    """
    device = torch.device(device)
    choice = torch.randint(len(ops), (steps, n), generator=generator, device=_draw_device(generator, device))
    uniforms = random_uniform((steps, n, 4), generator, device)
    op_ids = _constant(tuple(OPS.index(op) for op in ops), torch.long, device)[choice.to(device)]
    return op_ids, op_magnitudes(op_ids.flatten(), uniforms.flatten(0, 1), severity, *size).view(steps, n)


def apply_ops(
    images: torch.Tensor,
    op_ids: torch.Tensor,
    values: torch.Tensor,
    ops: Sequence[str],
    *,
    quantize: bool = False,
    grouped: bool | None = None,
) -> torch.Tensor:
    """Apply (steps, N) ops (`draw_ops`; op id -1 = none) to (N, C, H, W) pixels, step by step.

    Args:
        images: float pixels in [0, 255] (not modified).
        op_ids, values: each sample's op and magnitude at each step.
        ops: every op that may occur (the primitives the dense path runs).
        quantize: round to 8-bit levels after each step (uint8 data: PIL works in 8 bits).
        grouped: how a step runs. Dense (False): every primitive runs on the whole batch with identity
            parameters for the samples that drew another op, so nothing depends on the data's
            values: no host synchronisation on an accelerator. Grouped (True): samples are sorted by
            primitive and each primitive runs on its own samples only, which reads the group sizes on
            the host, so it is free only on CPU. Default: grouped on CPU, dense elsewhere. Both give
            the same result.
    """
    n, _, h, w = images.shape
    if images.device.type == "cpu" if grouped is None else grouped:
        # In cache-sized blocks of samples: a whole large batch streams through memory at every
        # primitive, while a block stays in cache (each sample's ops are its own, so the result
        # is the same).
        block = max(1, _CPU_BLOCK_BYTES // max(1, images[0].numel() * images.element_size()))
        if n <= block:
            return _apply_grouped(images.clone(), op_ids, values, quantize)
        parts = [
            _apply_grouped(images[i : i + block].clone(), op_ids[:, i : i + block], values[:, i : i + block], quantize)
            for i in range(0, n, block)
        ]
        return torch.cat(parts)
    for step in range(op_ids.shape[0]):
        images = apply_op_parameters(images, primitive_parameters(op_ids[step], values[step], h, w, ops))
        images = images.round() if quantize else images
    return images


def augment_batch(
    images: torch.Tensor,
    ops: Sequence[str],
    severity: float,
    steps: int,
    generator: torch.Generator | None = None,
    *,
    quantize: bool = False,
    grouped: bool | None = None,
) -> torch.Tensor:
    """`steps` random ops per sample of (N, C, H, W) pixels: `draw_ops`, then `apply_ops`."""
    n, _, h, w = images.shape
    op_ids, values = draw_ops(n, ops, severity, steps, (h, w), generator, images.device)
    return apply_ops(images, op_ids, values, ops, quantize=quantize, grouped=grouped)


def augment_image(
    image: torch.Tensor,
    ops: Sequence[str],
    severity: float,
    steps: int,
    generator: torch.Generator | None = None,
    *,
    quantize: bool = False,
) -> torch.Tensor:
    """The per-image reference of `augment_batch`: (1, C, H, W), only the drawn primitive runs."""
    _, _, h, w = image.shape
    for _ in range(steps):
        op = ops[int(torch.randint(len(ops), (1,), generator=generator, device=_draw_device(generator, image.device)))]
        uniforms = random_uniform((1, 4), generator, image.device)
        op_id = torch.full((1,), OPS.index(op), device=image.device)
        values = op_magnitudes(op_id, uniforms, severity, h, w)
        image = apply_op_parameters(image, primitive_parameters(op_id, values, h, w, (op,)))
        if quantize:
            image = image.round()
    return image


# Image formats -----------------------------------------------------------------------------------


def _is_pil(image: Any) -> bool:
    return type(image).__module__.startswith("PIL.") and hasattr(image, "getbands")


def pil_to_tensor(image: Any) -> torch.Tensor:
    """An 8-bit PIL image as a ``(bands, H, W)`` uint8 tensor (no NumPy needed)."""
    if image.mode not in _EIGHT_BIT_MODES:
        raise TypeError(
            f"PIL images must have 8 bits per band (modes {', '.join(_EIGHT_BIT_MODES)}), got {image.mode!r}; "
            "convert with image.convert('RGB')"
        )
    (w, h), c = image.size, len(image.getbands())
    return torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).view(h, w, c).permute(2, 0, 1)


def tensor_to_pil(pixels: torch.Tensor, mode: str) -> Any:
    """The inverse of `pil_to_tensor`: ``(bands, H, W)`` values in [0, 255] to a PIL image of `mode`."""
    from PIL import Image  # lazily: only PIL inputs need it

    array = pixels.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()
    return Image.frombytes(mode, (array.shape[1], array.shape[0]), array.numpy().tobytes())


_EIGHT_BIT_MODES = ("L", "LA", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV")


def _from_pil(image: Any) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
    if image.mode not in ("L", "RGB"):
        raise TypeError(
            f"PIL images must be in mode 'L' or 'RGB', got {image.mode!r}; convert with image.convert('RGB')"
        )
    mode = image.mode
    return pil_to_tensor(image).unsqueeze(0).float(), lambda pixels: tensor_to_pil(pixels[0], mode)


def to_pixels(images: Any, *, single: bool = False) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any], bool]:
    """Float NCHW pixels in [0, 255], a function that turns them back into the input's type, and
    whether the input was 8-bit (uint8 or PIL).

    Accepts NCHW tensors, and with ``single=True`` also a CHW tensor or a PIL image ('L'/'RGB').
    Tensors must be unnormalised: uint8, or float in [0, 1]. Floats are clamped to [0, 1]; on CPU,
    where the check costs no device synchronisation, floats far outside it raise (normalised data).
    """
    if single and _is_pil(images):
        pixels, restore = _from_pil(images)
        return pixels, restore, True
    if not isinstance(images, torch.Tensor):
        kind = "a PIL image or a CHW tensor" if single else "an NCHW tensor"
        raise TypeError(f"expected {kind}, got {type(images).__name__}")
    expected = (3,) if single else (4,)
    if images.ndim not in expected or images.shape[-3] not in (1, 3):
        shape = "CHW" if single else "NCHW"
        raise ValueError(f"expected a {shape} tensor with 1 or 3 channels, got shape {tuple(images.shape)}")
    dtype = images.dtype
    if dtype != torch.uint8 and not dtype.is_floating_point:
        raise TypeError(f"images must be uint8 or float in [0, 1] (unnormalised), got dtype {dtype}")
    channels_last = images.ndim == 4 and images.is_contiguous(memory_format=torch.channels_last)
    channels_last = channels_last and not images.is_contiguous()
    work = torch.float64 if dtype == torch.float64 else torch.float32
    batch = images if images.ndim == 4 else images.unsqueeze(0)
    if dtype.is_floating_point and batch.device.type == "cpu" and batch.numel():
        low, high = batch.aminmax()
        if low < -0.5 or high > 1.5:
            raise ValueError(
                f"images look normalised (values in [{float(low):.2f}, {float(high):.2f}]); augment unnormalised "
                "images (uint8, or float in [0, 1]) and normalise afterwards, e.g. inside the model"
            )
    pixels = batch.to(work).clamp(0, 1).mul_(255) if dtype.is_floating_point else batch.to(work)

    def restore(out: torch.Tensor) -> torch.Tensor:
        out = out.round().clamp_(0, 255).to(dtype) if dtype == torch.uint8 else (out / 255).clamp_(0, 1).to(dtype)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out if images.ndim == 4 else out[0]

    return pixels, restore, dtype == torch.uint8


def map_images(function: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """`function` applied to each CHW image of an NCHW batch in turn (the per-image reference), with
    the batch's memory format kept."""
    out = torch.stack([function(image) for image in images])
    channels_last = images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


# Dataset transforms -------------------------------------------------------------------------------

_TO_TENSOR = {"ToTensor", "PILToTensor", "ToImage", "ToImageTensor"}


class _Then:
    """``second(first(x))``; picklable, so it reaches DataLoader worker processes."""

    def __init__(self, first: Callable[[Any], Any], second: Callable[[Any], Any]):
        self.first, self.second = first, second

    def __call__(self, sample: Any) -> Any:
        return self.second(self.first(sample))

    def __repr__(self) -> str:
        return f"{self.first!r} -> {self.second!r}"


def _insert(existing: Callable[[Any], Any] | None, transform: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if existing is None:
        return transform
    steps = getattr(existing, "transforms", None)
    if type(existing).__name__ == "Compose" and isinstance(steps, list):
        for index, step in enumerate(steps):
            if type(step).__name__ in _TO_TENSOR:  # augment the final-size image, as Composer does
                return type(existing)([*steps[:index], transform, *steps[index:]])
    return _Then(transform, existing)


def add_dataset_transform(dataloader: Any, transform: Callable[[Any], Any]) -> None:
    """Make `dataloader`'s dataset run `transform` on every raw sample.

    The dataset must have a ``transform`` attribute (a torchvision ``VisionDataset``). In a
    torchvision ``Compose`` the transform goes just before ``ToTensor``/``PILToTensor`` (so it sees
    the final-size image); otherwise it runs before the dataset's own transform. The user's
    ``Compose`` is copied, never changed (another dataset may share it). Worker processes copy the
    dataset when an iterator starts, so this works for ``num_workers=0`` and for workers started
    afterwards, but not for persistent workers already running, which raise here.
    """
    from torch.utils.data import DataLoader

    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"the dataset-transform path needs a torch DataLoader, got {type(dataloader).__name__}")
    dataset = dataloader.dataset
    if not hasattr(dataset, "transform"):
        raise TypeError(
            f"{type(dataset).__name__} has no `transform` attribute to extend; use a torchvision VisionDataset, "
            "add the transform to your dataset yourself, or augment on the device with batched=True"
        )
    if getattr(dataloader, "_iterator", None) is not None:
        raise RuntimeError(
            "the DataLoader's persistent workers are already running and would never see the new transform; "
            "use batched=True, or add the transform to the dataset before creating the DataLoader"
        )
    dataset.transform = _insert(dataset.transform, transform)
    joint = getattr(dataset, "transforms", None)
    if type(joint).__name__ == "StandardTransform":  # torchvision keeps a second reference here
        joint.transform = dataset.transform
