"""Images in and out of the batched augmentations: PIL images and CHW/NCHW tensors as float pixels.

`to_pixels` turns what a user passes (an NCHW batch, or a CHW tensor or PIL image) into float
NCHW pixels in [0, 255] plus the function that turns results back into the input's type, dtype and
memory format. PIL is imported lazily, only when a PIL image is passed. Torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["is_pil_image", "map_images", "pil_to_tensor", "tensor_to_pil", "to_pixels"]


def is_pil_image(image: Any) -> bool:
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


def to_pixels(
    images: Any, *, single: bool = False, any_range: bool = False
) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any], bool]:
    """Float NCHW pixels in [0, 255], a function that turns them back into the input's type (it may
    overwrite the float pixels it is given), and whether the input was 8-bit (uint8 or PIL).

    Accepts NCHW tensors, and with ``single=True`` also a CHW tensor or a PIL image ('L'/'RGB').
    Tensors are expected unnormalised: uint8, or float in [0, 1], which is clamped to [0, 1]. Floats
    far outside it (normalised data) raise on CPU, where the check costs no device synchronisation;
    with ``any_range=True`` they are accepted instead: each image is mapped from its own
    ``[min, max]`` to [0, 255] and back (see `_float_range`), on the device, without synchronising.
    """
    if single and is_pil_image(images):
        pixels, to_pil = _from_pil(images)
        return pixels, to_pil, True
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
    if dtype.is_floating_point and not any_range and batch.device.type == "cpu" and batch.numel():
        lowest, highest = batch.aminmax()
        if lowest < -0.5 or highest > 1.5:
            raise ValueError(
                f"images look normalised (values in [{float(lowest):.2f}, {float(highest):.2f}]); augment unnormalised "
                "images (uint8, or float in [0, 1]) and normalise afterwards, e.g. inside the model"
            )
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None
    if dtype.is_floating_point and any_range and batch.numel():
        low, high = _float_range(batch.to(work))
        pixels = ((batch.to(work) - low) / (high - low)).clamp_(0, 1).mul_(255)
    elif dtype.is_floating_point:
        pixels = batch.to(work).clamp(0, 1).mul_(255)
    else:
        pixels = batch.to(work)

    def restore(out: torch.Tensor) -> torch.Tensor:
        if dtype == torch.uint8:
            # in place (out is the pipeline's own; no fresh batch-sized tensors, which page-fault on CPU):
            # adding 2**23 rounds a float in [0, 255] half to even, as round(), and leaves the level in the
            # low bits of its int32 view; int32 -> uint8 keeps them (several times faster than float -> uint8)
            out = out.clamp_(0, 255).add_(8388608.0).view(torch.int32).to(dtype)
        elif low is not None and high is not None:
            out = torch.maximum(torch.minimum(out / 255 * (high - low) + low, high), low).to(dtype)
        else:
            out = (out / 255).clamp_(0, 1).to(dtype)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out if images.ndim == 4 else out[0]

    return pixels, restore, dtype == torch.uint8


def _float_range(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's pixel range, ``(N, 1, 1, 1)`` low and high: [0, 1] for unnormalised images (values
    within [-0.5, 1.5], clamped to [0, 1] as without ``any_range``), else the image's own min and max
    (normalised data: the operations then see that range as black to white)."""
    low = batch.amin(dim=(1, 2, 3), keepdim=True)
    high = batch.amax(dim=(1, 2, 3), keepdim=True)
    unit = (low >= -0.5) & (high <= 1.5)
    low = torch.where(unit, torch.zeros_like(low), low)
    high = torch.where(unit, torch.ones_like(high), torch.maximum(high, low + 1e-6))
    return low, high


def map_images(function: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """`function` applied to each CHW image of an NCHW batch in turn (the per-image reference), with
    the batch's memory format kept."""
    out = torch.stack([function(image) for image in images])
    channels_last = images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out
