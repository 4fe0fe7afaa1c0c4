"""ColOut as pure functions: drop random rows and columns of images (and of same-sized targets)."""

from __future__ import annotations

from typing import Any

import torch

from cadence.ops.checks import check_number
from cadence.ops.pil import is_pil_image, pil_to_tensor, tensor_to_pil

__all__ = ["ColOutTransform", "check_colout_args", "colout_batch"]


def check_colout_args(p_row: float, p_col: float, resize_target: bool | str) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    for name, p in (("p_row", p_row), ("p_col", p_col)):
        check_number(name, p, ge=0, lt=1, hint="the fraction of lines to drop")
    if not isinstance(resize_target, bool) and resize_target != "auto":
        raise ValueError(f"`resize_target` must be True, False or 'auto', got resize_target={resize_target!r}")


def colout_batch(
    sample: Any,
    p_row: float = 0.15,
    p_col: float = 0.15,
    resize_target: bool | str = "auto",
    *,
    batch: bool = True,
    generator: torch.Generator | None = None,
) -> Any:
    """Drop a random fraction of the rows and columns of images, keeping the rest in order.

    The image shrinks (cheaper forward and backward passes) while its content stays whole:
    a cheap resize with random jitter. ``int((1 - p_row) * H)`` rows and ``int((1 - p_col) * W)``
    columns are kept (at least one of each).

    Args:
        sample: an image (tensor ``(C, H, W)``, batch ``(N, C, H, W)`` or PIL image), or an
            ``(input, target)`` pair of them; a pair comes back as a pair of the same type.
        p_row: fraction of rows to drop, in [0, 1).
        p_col: fraction of columns to drop, in [0, 1).
        resize_target: drop the same rows and columns from the target: True, False, or 'auto'
            (when the target has the input's H and W: a segmentation mask; a label vector is left alone).
        batch: True drops the same rows and columns from every image (Composer's batch mode).
            False draws them per image (same counts, so the batch stays rectangular).
        generator: draws the lines to keep (the global RNG when None); on the input's device.

    Returns:
        The same structure as `sample`, smaller. Tensors keep dtype, device and memory format.
    """
    check_colout_args(p_row, p_col, resize_target)
    is_pair = isinstance(sample, (tuple, list))
    if is_pair and len(sample) != 2:
        raise ValueError(f"`sample` must be an image or an (input, target) pair, got {len(sample)} items")
    input, target = (sample[0], sample[1]) if is_pair else (sample, None)
    images = _to_tensor(input, "input")
    if images.ndim not in (3, 4):
        raise ValueError(f"`sample` images must be (C, H, W) or (N, C, H, W), got shape {tuple(images.shape)}")
    num_draws = 1 if batch or images.ndim == 3 else images.shape[0]
    rows = _kept_lines(images.shape[-2], p_row, num_draws, generator, images.device)
    cols = _kept_lines(images.shape[-1], p_col, num_draws, generator, images.device)
    new_input = _from_tensor(_drop(images, rows, cols), input)
    if not is_pair:
        return new_input
    new_target = target
    if _should_resize_target(images, target, resize_target):
        new_target = _from_tensor(_drop(_to_tensor(target, "target"), rows, cols), target)
    return type(sample)((new_input, new_target))


class ColOutTransform:
    """`colout_batch` as a dataset transform: ``ColOutTransform(0.15, 0.15)(pil_image_or_chw_or_pair)``.

    Uses the global RNG, which DataLoader workers seed differently each.
    """

    def __init__(self, p_row: float = 0.15, p_col: float = 0.15, resize_target: bool | str = "auto"):
        check_colout_args(p_row, p_col, resize_target)
        self.p_row, self.p_col, self.resize_target = p_row, p_col, resize_target

    def __call__(self, sample: Any) -> Any:
        return colout_batch(sample, self.p_row, self.p_col, self.resize_target)

    def __repr__(self) -> str:
        return f"ColOutTransform(p_row={self.p_row}, p_col={self.p_col}, resize_target={self.resize_target!r})"


def _kept_lines(
    size: int, p: float, num_draws: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``(num_draws, k)`` sorted indices of the lines kept: the k smallest of uniform scores."""
    keep = max(1, int((1 - p) * size))
    scores = torch.rand((num_draws, size), generator=generator, device=device)
    return scores.topk(keep, dim=1, largest=False).indices.sort(dim=1).values


def _drop(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Keep `rows` of dim -2 and `cols` of dim -1: shared (one draw) or per sample (a batched gather)."""
    if rows.shape[0] == 1:
        out = x.index_select(-2, rows[0]).index_select(-1, cols[0])
    else:
        ones = [1] * (x.ndim - 3)
        row_index = rows.view(rows.shape[0], *ones, rows.shape[1], 1).expand(*x.shape[:-2], rows.shape[1], x.shape[-1])
        out = x.gather(-2, row_index)
        col_index = cols.view(cols.shape[0], *ones, 1, cols.shape[1]).expand(*out.shape[:-1], cols.shape[1])
        out = out.gather(-1, col_index)
    channels_last = x.ndim == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def _should_resize_target(images: torch.Tensor, target: Any, resize_target: bool | str) -> bool:
    if resize_target is False:
        return False
    if is_pil_image(target):
        same = tuple(target.size[::-1]) == tuple(images.shape[-2:])
    else:  # a mask has the image's H, W and at most one dim fewer (no channel dim); labels never do
        same = (
            isinstance(target, torch.Tensor)
            and target.ndim >= max(2, images.ndim - 1)
            and target.shape[-2:] == images.shape[-2:]
            and (images.ndim == 3 or target.shape[0] == images.shape[0])
        )
    if resize_target is True and not same:
        shape = target.size[::-1] if is_pil_image(target) else getattr(target, "shape", type(target).__name__)
        raise ValueError(
            f"`resize_target`=True but the target ({shape}) does not have the images' H, W "
            f"{tuple(images.shape[-2:])}; use resize_target='auto' or False"
        )
    return same


def _to_tensor(x: Any, name: str) -> torch.Tensor:
    """A tensor as is; a PIL image as a ``(bands, H, W)`` uint8 tensor."""
    if isinstance(x, torch.Tensor):
        return x
    if not is_pil_image(x):
        raise TypeError(f"`sample` {name} must be a torch.Tensor or a PIL image, got {type(x).__name__}")
    return pil_to_tensor(x)


def _from_tensor(x: torch.Tensor, like: Any) -> Any:
    return x if isinstance(like, torch.Tensor) else tensor_to_pil(x, like.mode)
