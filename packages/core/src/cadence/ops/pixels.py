"""Pixel primitives of the image augmentations: batched, one parameter per sample, exact at identity.

Every primitive takes a float NCHW batch in *pixel units* (values in [0, 255], so uint8 data is
represented exactly) and one parameter per sample, and each parameter has an identity value that
leaves its sample exactly unchanged. They follow PIL's ``ImageEnhance``/``ImageOps``/``Image.transform``
(as Composer's per-image ``augmentation_primitives`` do): colour operations blend with a degenerate
image (factor 1 = identity), the point operations (autocontrast, equalize, posterize, solarize) use
per-sample-channel statistics (equalize: batched histograms), geometric operations are per-sample
2x3 affine matrices applied with one ``grid_sample``. Per-sample choices use ``torch.lerp`` (exact at
weights 0 and 1) rather than ``torch.where`` on image-sized masks, which is several times slower on CPU.
Torch only.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "autocontrast",
    "brightness",
    "color",
    "contrast",
    "device_constant",
    "equalize",
    "posterize",
    "sharpness",
    "solarize",
    "warp_affine",
]


@functools.lru_cache(maxsize=128)
def device_constant(values: tuple[Any, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
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
    luma = device_constant((0.299, 0.587, 0.114), images.dtype, images.device).view(1, 3, 1, 1)
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
    return _autocontrast(images, _per_sample(enabled, images) != 0)


def _autocontrast(images: torch.Tensor, enabled: torch.Tensor | None) -> torch.Tensor:
    low, high = images.amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)
    stretch = high > low if enabled is None else (high > low) & enabled
    scale = torch.where(stretch, 255 / (high - low).clamp_min(1e-12), 1.0)
    return ((images - torch.where(stretch, low, 0.0)) * scale).clamp_(0, 255)


def equalize(images: torch.Tensor, enabled: torch.Tensor) -> torch.Tensor:
    """``ImageOps.equalize`` per channel (on the 8-bit levels) where `enabled` is nonzero."""
    return _choose(_per_sample(enabled, images), _equalize(images), images)


def _equalize(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    levels = images.nan_to_num(0.0).round().clamp_(0, 255).long().reshape(n * c, h * w)  # NaN: bin 0, not an error
    ones = torch.ones((), dtype=images.dtype, device=images.device).expand(levels.shape)
    hist = torch.zeros(n * c, 256, dtype=images.dtype, device=images.device).scatter_add_(1, levels, ones)
    bins = torch.arange(256, dtype=images.dtype, device=images.device)
    last = torch.where(hist > 0, bins, 0).argmax(dim=1, keepdim=True)  # the highest level present
    step = torch.div(h * w - hist.gather(1, last), 255, rounding_mode="floor")
    below = hist.cumsum(1) - hist  # pixels below each level
    lut = torch.div(torch.div(step, 2, rounding_mode="floor") + below, step.clamp_min(1), rounding_mode="floor")
    lut = torch.where(step > 0, lut.clamp_(0, 255), bins)  # one level only: unchanged (as PIL)
    return lut.gather(1, levels).view(n, c, h, w)


def _equalize_cpu(images: torch.Tensor) -> torch.Tensor:
    """`_equalize` in integers with one bincount (the float path's scatter_add is the slow part on CPU):
    the same counts and the same floor divisions, exact in both while H * W < 2**24. CPU only (the
    grouped path's), as bincount reads its size on the host."""
    n, c, h, w = images.shape
    if images.device.type != "cpu" or not 0 < h * w < 1 << 24:
        return _equalize(images).long()
    levels = images.nan_to_num(0.0).round_().clamp_(0, 255).to(torch.int64).reshape(n * c, h * w)
    offsets = torch.arange(0, n * c * 256, 256, device=images.device).view(-1, 1)
    hist = torch.bincount((levels + offsets).reshape(-1), minlength=n * c * 256).view(n * c, 256)
    step = (h * w - hist.gather(1, levels.amax(dim=1, keepdim=True))).div_(255, rounding_mode="floor")
    lut = (hist.cumsum(1) - hist).add_(step // 2).div_(step.clamp_min(1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.where(step > 0, lut, torch.arange(256, device=images.device))  # one level only: unchanged
    return lut.gather(1, levels).view(n, c, h, w)  # integer levels: the caller converts (or copies) them


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """``ImageOps.posterize``: keep the top `bits` bits of each level (8 = unchanged)."""
    bits = _per_sample(bits, images)
    return _choose((bits < 8).to(images.dtype), _posterize(images, bits), images)


def _posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    quantum = torch.exp2(8 - _per_sample(bits, images))
    return torch.floor(images / quantum) * quantum


def _posterize_(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    quantum = torch.exp2(8 - _per_sample(bits, images))
    return images.div_(quantum).floor_().mul_(quantum)


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """``ImageOps.solarize``: invert levels at or above `threshold` (256 = unchanged).

    A float level counts as its nearest 8-bit level, so it is inverted from ``threshold - 0.5``.
    """
    return torch.addcmul(images, _solarize_sign(images, threshold), 127.5 - images)  # x + (255 - 2x) where above


def _solarize_sign(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    return torch.sign(images - (_per_sample(threshold, images) - 0.5)) + 1  # 2 above, 0 below


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
    m = matrix.to(device=images.device, dtype=images.dtype)
    identity = (m == torch.eye(2, 3, dtype=m.dtype, device=m.device)).flatten(1).all(dim=1).view(-1, 1, 1, 1)
    return _choose(identity.to(images.dtype), images, _warp_affine(images, m))


def _warp_affine(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """`warp_affine` without the identity check: identity matrices give nearly, not exactly, the input."""
    n, _, h, w = images.shape
    # the map into grid_sample's coordinates (align_corners=False: -1 and 1 are the outer edges)
    scale = device_constant(((2 / w,), (2 / h,)), m.dtype, m.device)
    normal = m * scale - device_constant((0.0, 0.0, 1.0), m.dtype, m.device)
    x, y = _pixel_centres(h, w, m.dtype, m.device)
    grid = torch.addcmul(torch.addcmul(normal[..., 2:], x, normal[..., :1]), y, normal[..., 1:2])  # (N, 2, H * W)
    # a strided (N, H, W, 2) view: grid_sample reads it as is, no transposing copy
    grid_view = grid.view(n, 2, h, w).permute(0, 2, 3, 1)
    warped = F.grid_sample(images, grid_view, mode="bilinear", padding_mode="border", align_corners=False)
    # 1 inside the image, 0 outside (the ramp between is 1e-7 of the image wide); (reach - 1) * -1e7 is
    # exactly (1 - reach) * 1e7, computed in place
    inside = grid.abs_().amax(dim=1).sub_(1).mul_(-1e7).add_(1).clamp_(0, 1).view(n, 1, h, w)
    return warped.mul_(inside)


_SCRATCH = threading.local()
_SCRATCH_LIMIT = 1 << 20  # elements (4 MiB of float32): larger temporaries are made fresh, not kept


def _scratch(slot: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of `shape` in `slot` (its contents are garbage), on CPU kept per thread for later calls:
    a fresh batch-sized temporary page-faults on CPU, about as much as computing into it."""
    numel = math.prod(shape)
    if device.type != "cpu" or numel > _SCRATCH_LIMIT:
        return torch.empty(shape, dtype=dtype, device=device)
    cache = _SCRATCH.__dict__.setdefault("tensors", {})
    kept = cache.get((slot, dtype))
    if kept is None or kept.numel() < numel:
        kept = cache[(slot, dtype)] = torch.empty(numel, dtype=dtype)
    return kept[:numel].view(shape)


def _warp_affine_(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """`_warp_affine` into `images` (CPU), its temporaries in scratch tensors: the same ops on the
    same shapes, so the same values."""
    n, c, h, w = images.shape
    scale = device_constant(((2 / w,), (2 / h,)), m.dtype, m.device)
    normal = m * scale - device_constant((0.0, 0.0, 1.0), m.dtype, m.device)
    x, y = _pixel_centres(h, w, m.dtype, m.device)
    grid = torch.addcmul(normal[..., 2:], x, normal[..., :1], out=_scratch(0, (n, 2, h * w), m.dtype, m.device))
    grid = grid.addcmul_(y, normal[..., 1:2])
    # grid_sample(mode="bilinear", padding_mode="border", align_corners=False), into a scratch tensor
    warped = _scratch(1, (n, c, h, w), images.dtype, images.device)
    torch.ops.aten.grid_sampler_2d.out(images, grid.view(n, 2, h, w).permute(0, 2, 3, 1), 0, 1, False, out=warped)
    inside = torch.amax(grid.abs_(), dim=1, out=_scratch(2, (n, h * w), m.dtype, m.device))
    inside = inside.sub_(1).mul_(-1e7).add_(1).clamp_(0, 1).view(n, 1, h, w)
    return torch.mul(warped, inside, out=images)


#: The primitives that check per sample whether it changes, without that check: for a caller that
#: has set aside the samples whose parameter is the identity (`cadence.ops.augment` on CPU), to which
#: the check is a wasted pass over the images.
UNCHECKED: dict[str, Any] = {
    "affine": lambda images, matrix: _warp_affine(images, matrix.to(device=images.device, dtype=images.dtype)),
    "autocontrast": lambda images, enabled: _autocontrast(images, None),
    "equalize": lambda images, enabled: _equalize_cpu(images).to(images.dtype),
    "posterize": _posterize,
}


def _blend_(images: torch.Tensor, degenerate: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return torch.lerp(degenerate, images, _per_sample(factor, images), out=images).clamp_(0, 255)


def _autocontrast_(images: torch.Tensor) -> torch.Tensor:
    low, high = images.amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)
    stretch = high > low
    scale = torch.where(stretch, 255 / (high - low).clamp_min(1e-12), 1.0)
    return images.sub_(torch.where(stretch, low, 0.0)).mul_(scale).clamp_(0, 255)


#: `UNCHECKED` (with the checked ones) writing into their `images` instead of returning a new batch:
#: for the CPU grouped path, whose samples sit in a work buffer that the result would be copied
#: into. The very same arithmetic (elementwise ops give the same values in place), one pass less.
IN_PLACE: dict[str, Any] = {
    "affine": lambda images, matrix: _warp_affine_(images, matrix.to(images.device, images.dtype)),
    "color": lambda images, factor: _blend_(images, _gray(images), factor),
    "contrast": lambda images, factor: _blend_(images, _gray(images).mean(dim=(1, 2, 3), keepdim=True), factor),
    "brightness": lambda images, factor: images.mul_(_per_sample(factor, images)).clamp_(0, 255),
    "sharpness": lambda images, factor: _blend_(images, _smooth(images), factor),
    "autocontrast": lambda images, enabled: _autocontrast_(images),
    "equalize": lambda images, enabled: images.copy_(_equalize_cpu(images)),
    "posterize": lambda images, bits: _posterize_(images, bits),
    "solarize": lambda images, threshold: images.addcmul_(_solarize_sign(images, threshold), 127.5 - images),
}
