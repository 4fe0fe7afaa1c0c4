"""CutMix as pure tensor functions (Yun et al., 2019, https://arxiv.org/abs/1905.04899)."""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import torch

from cadence.ops.checks import check_bool, check_number
from cadence.ops.mixing import interpolate_loss, mix_with_permutation
from cadence.ops.mixing import random_permutation as _draw_indices
from cadence.ops.sampling import sample_beta

__all__ = ["check_alpha", "cutmix_batch", "is_segmentation_target", "paste_box", "sample_bbox"]

BBox = tuple[int, int, int, int]


def cutmix_batch(
    input: torch.Tensor,
    target: torch.Tensor,
    length: float | None = None,
    alpha: float = 1.0,
    bbox: tuple[int, int, int, int] | None = None,
    indices: torch.Tensor | None = None,
    uniform_sampling: bool = False,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, float, BBox]:
    """Paste the same box of a shuffled copy of the batch into every example.

    The box covers about ``1 - λ`` of the image, ``λ ~ Beta(alpha, alpha)``: its sides are
    ``int(H * sqrt(1 - λ))`` and ``int(W * sqrt(1 - λ))``. It is centred at a random pixel and clipped
    at the borders, so it can come out smaller; `area` reports what was actually pasted.

    Args:
        input: ``(N, ..., H, W)``; the box spans the last two dimensions.
        target: targets ``(N, ...)``; only permuted here.
        length: a fixed box side as a fraction of H and W, in [0, 1] (the box is
            ``int(length * H) x int(length * W)`` before clipping); λ is then not drawn.
        alpha: the Beta concentration, > 0; 1 (the paper's value) draws λ uniformly.
        bbox: a fixed box ``(x1, y1, x2, y2)``, pasted as ``input[..., x1:x2, y1:y2]``: as in Composer,
            x indexes rows (H) and y columns (W). Exclusive with `length`.
        indices: the permutation, an integer tensor ``(N,)``; drawn uniformly when None.
        uniform_sampling: False draws the centre uniformly over the image (the paper's code), so border
            pixels are pasted less often. True draws it over the image grown by half a box on each side,
            so every pixel is pasted with the same probability.
        generator: the source of every random draw (the global RNG when None).

    Returns:
        ``(mixed_input, target_perm, area, bbox)``. ``target_perm = target[indices]``. `area` is the
        fraction of each image that was NOT pasted over, ``1 - box_area / (H * W)`` (Composer's
        "adjusted lambda"): it is the weight of the ORIGINAL target, so mix labels as
        ``area * y + (1 - area) * y_perm``. Segmentation targets (with the input's H and W) take the
        box instead: ``y = y.clone(); y[..., x1:x2, y1:y2] = y_perm[..., x1:x2, y1:y2]``.

    Raises:
        ValueError: both `length` and `bbox`, `alpha` <= 0, `length` outside [0, 1], a box outside the
            image, or `indices` of the wrong shape.
        TypeError: `input` is not a tensor with at least 3 dimensions, or `uniform_sampling` is not a bool.
    """
    if length is not None and bbox is not None:
        raise ValueError(f"pass `length` or `bbox`, not both; got length={length!r} and bbox={bbox!r}")
    check_alpha(alpha)
    check_bool("uniform_sampling", uniform_sampling)
    if not isinstance(input, torch.Tensor) or input.ndim < 3:
        shape = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise TypeError(f"`input` must be a tensor (N, ..., H, W) with at least 3 dimensions, got {shape}")
    height, width = input.shape[-2:]
    if bbox is None:
        bbox = sample_bbox(height, width, length, alpha, uniform_sampling, generator)
    bbox = _check_bbox(bbox, height, width)
    if indices is None:
        indices = _draw_indices(input.shape[0], input.device, generator)
    elif indices.shape != (input.shape[0],):
        raise ValueError(f"`indices` must have shape ({input.shape[0]},), got {tuple(indices.shape)}")
    return paste_box(input, indices, bbox), target[indices], _area(bbox, height, width), bbox


def sample_bbox(
    height: int,
    width: int,
    length: float | None = None,
    alpha: float = 1.0,
    uniform_sampling: bool = False,
    generator: torch.Generator | None = None,
) -> BBox:
    """A box ``(x1, y1, x2, y2)`` of side ``ratio * (H, W)`` around a random centre, clipped to the image.

    ``ratio = sqrt(1 - λ)``, ``λ ~ Beta(alpha, alpha)``, or `length` when given; drawn on the generator's
    device (as Python ints: on an accelerator, draw it with a CPU generator).
    """
    if length is None:
        ratio = math.sqrt(1.0 - _draw_lambda(alpha, generator))
    elif isinstance(length, bool) or not isinstance(length, numbers.Real) or not 0.0 <= length <= 1.0:
        raise ValueError(f"`length` must be a fraction of the image side in [0, 1], got {length!r}")
    else:
        ratio = float(length)
    cuts = (int(height * ratio), int(width * ratio))
    source = generator if generator is not None else torch.default_generator
    uniforms = torch.rand(2, dtype=torch.float64, generator=source, device=source.device).tolist()
    corners = []
    for size, cut, u in zip((height, width), cuts, uniforms):
        # centre c covers [c - cut // 2, c - cut // 2 + cut); the uniform range lets every pixel be covered
        low, high = (min(0, cut // 2 - cut + 1), size + cut // 2) if uniform_sampling else (0, size)
        start = low + min(int(u * (high - low)), high - low - 1) - cut // 2
        corners.append((min(max(start, 0), size), min(max(start + cut, 0), size)))
    (x1, x2), (y1, y2) = corners
    return x1, y1, x2, y2


def paste_box(tensor: torch.Tensor, indices: torch.Tensor, bbox: BBox) -> torch.Tensor:
    """A copy of `tensor` whose box ``[..., x1:x2, y1:y2]`` comes from ``tensor[indices]``."""
    x1, y1, x2, y2 = bbox
    pasted = tensor.clone()  # keeps the memory format
    pasted[..., x1:x2, y1:y2] = tensor[indices, ..., x1:x2, y1:y2]
    return pasted


def _area(bbox: BBox, height: int, width: int) -> float:
    x1, y1, x2, y2 = bbox
    return 1.0 - (x2 - x1) * (y2 - y1) / (height * width)


def is_segmentation_target(target: Any, input: torch.Tensor) -> bool:
    """Targets with the input's H and W label pixels: they take the box instead of being interpolated."""
    return isinstance(target, torch.Tensor) and target.ndim >= 3 and target.shape[-2:] == input.shape[-2:]


def _mix(tensor: torch.Tensor, indices: torch.Tensor, area: float) -> torch.Tensor:
    """``area * tensor + (1 - area) * tensor[indices]``: class targets weighted by what each image shows."""
    return mix_with_permutation(tensor, indices, 1.0 - area)


def _draw_lambda(alpha: float, generator: torch.Generator | None) -> float:
    source = generator if generator is not None else torch.default_generator
    concentration = torch.tensor(float(alpha), dtype=torch.float64, device=source.device)
    return float(sample_beta(concentration, concentration, source))


def _interpolate_loss(loss: Any, other: Any, area: float) -> Any:
    """``area * loss + (1 - area) * other``: the loss weighted by what each image shows."""
    return interpolate_loss(loss, other, 1.0 - area)


def check_alpha(alpha: Any) -> float:
    """`alpha` as a float: a finite number > 0, or a ValueError naming it."""
    return check_number("alpha", alpha, gt=0, hint="1.0 (the paper's value) draws λ uniformly")


def _check_bbox(bbox: Any, height: int, width: int) -> BBox:
    try:
        x1, y1, x2, y2 = (operator.index(v) for v in bbox)
    except (TypeError, ValueError):
        raise ValueError(f"`bbox` must be four ints (x1, y1, x2, y2), got {bbox!r}") from None
    if not (0 <= x1 <= x2 <= height and 0 <= y1 <= y2 <= width):
        raise ValueError(
            f"`bbox`={bbox!r} must satisfy 0 <= x1 <= x2 <= H={height} and 0 <= y1 <= y2 <= W={width} "
            "(x indexes rows, y columns)"
        )
    return x1, y1, x2, y2
