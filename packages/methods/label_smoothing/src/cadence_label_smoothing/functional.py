"""Label smoothing as a pure tensor function (Szegedy et al., 2016, https://arxiv.org/abs/1512.00567)."""

from __future__ import annotations

from typing import Any

import torch

from cadence.ops.checks import check_number
from cadence.ops.targets import ensure_targets_one_hot

__all__ = ["check_smoothing", "smooth_labels"]


def smooth_labels(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """Mix the targets with the uniform distribution: ``onehot(target) * (1 - smoothing) + smoothing / C``.

    The model is then never asked for a probability of exactly 1, which keeps its logits from growing
    without bound. Every row of the result still sums to 1 (over dimension 1) when the target rows do.

    Args:
        logits: the model's outputs ``(N, C, ...)``; only their shape is read (``C = logits.shape[1]``).
        target: class indices ``(N, ...)`` (an integer tensor with values in [0, C)), or dense targets with
            the logits' shape (one-hot, already smoothed or mixed), so segmentation maps work too.
        smoothing: the weight of the uniform distribution, in [0, 1]; 0 returns the targets unchanged
            (index targets as one-hot), 1 returns the uniform distribution.

    Returns:
        Dense targets with the logits' shape: float32 (float64 for float64 logits) for index targets,
        the target's own dtype for dense ones.

    Raises:
        ValueError: `smoothing` outside [0, 1], or a target shape that fits neither form.
        TypeError: `logits` or `target` is not a tensor, or `smoothing` is not a number.
    """
    check_smoothing(smoothing)
    if not isinstance(logits, torch.Tensor) or logits.ndim < 2:
        raise TypeError(f"`logits` must be a tensor (N, C, ...), got {_describe(logits)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"`target` must be a tensor, got {type(target).__name__}")
    num_classes = logits.shape[1]
    return ensure_targets_one_hot(logits, target) * (1.0 - smoothing) + smoothing / num_classes


def check_smoothing(smoothing: Any) -> float:
    """`smoothing` as a float in [0, 1], or a ValueError/TypeError naming it."""
    return check_number("smoothing", smoothing, ge=0, le=1, hint="0.1 is the usual value")


def _describe(value: Any) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
