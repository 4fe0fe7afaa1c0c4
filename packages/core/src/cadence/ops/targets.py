"""Dense targets: class indices as one-hot, and the cross-entropy that accepts dense targets. Torch only.

Methods that rewrite labels (MixUp, CutMix, label smoothing) start from `ensure_targets_one_hot`;
`soft_cross_entropy` (the default loss of `cadence.Classifier`) scores what they produce.
`logits_of` finds the logits in what a model returned (a tensor, or a HuggingFace output).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ensure_targets_one_hot", "logits_of", "soft_cross_entropy"]


def logits_of(outputs: Any) -> Any:
    """The logits in `outputs`: the tensor itself, or the ``logits`` of a HuggingFace-style output."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else getattr(outputs, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else outputs


def ensure_targets_one_hot(input: Any, targets: torch.Tensor) -> torch.Tensor:
    """`targets` as dense per-class weights with the shape of the logits `input`.

    Class indices (``N`` or ``N, ...`` for segmentation) become one-hot along dimension 1 with
    ``num_classes = input.shape[1]``; dense targets (one-hot, smoothed, mixed) pass through, as
    floats. Methods that rewrite labels (MixUp, CutMix, label smoothing) start from this.
    """
    if not isinstance(input, torch.Tensor):
        raise TypeError(
            f"index targets are made one-hot with num_classes = outputs.shape[1], but the outputs are a "
            f"{type(input).__name__}; return logits from the model, or pass dense (one-hot) targets"
        )
    dtype = torch.promote_types(input.dtype, torch.float32)
    if targets.shape == input.shape:
        return targets if targets.is_floating_point() else targets.to(dtype)
    if not targets.is_floating_point() and targets.shape == input.shape[:1] + input.shape[2:]:
        return F.one_hot(targets, input.shape[1]).movedim(-1, 1).to(dtype)
    raise ValueError(
        f"`targets` of shape {tuple(targets.shape)} and dtype {targets.dtype} fit logits of shape "
        f"{tuple(input.shape)} neither as class indices (an integer tensor of shape "
        f"{tuple(input.shape[:1] + input.shape[2:])}) nor as dense targets (the logits' shape)"
    )


def soft_cross_entropy(
    input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", **kwargs: Any
) -> torch.Tensor:
    """Cross-entropy for class indices *or* dense targets (one-hot, smoothed, mixed).

    Dense targets must have the logits' shape; methods such as MixUp and label smoothing
    produce them.
    """
    if target.is_floating_point() and target.shape != input.shape:
        raise ValueError(f"dense targets must have the logits' shape {tuple(input.shape)}, got {tuple(target.shape)}")
    return F.cross_entropy(input, target, reduction=reduction, **kwargs)
