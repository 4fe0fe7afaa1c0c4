"""Metrics cadence adds to torchmetrics.

Imported on first use (``Classifier.get_metrics``): ``import torchmetrics`` also imports
torchvision and transformers when they are installed, which ``import cadence`` avoids.
"""

from __future__ import annotations

import torch
from torchmetrics.aggregation import MeanMetric

from cadence.ops.targets import soft_cross_entropy

__all__ = ["CrossEntropy"]


class CrossEntropy(MeanMetric):
    """Mean cross-entropy over every sample seen (exact across batches and ranks); dense targets welcome.

    Sums on the device: `MeanMetric`'s own update checks for NaNs with a host sync per batch; here a NaN
    loss makes the mean NaN (which it is)."""

    accepts_dense_targets = True

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[override]
        losses = soft_cross_entropy(preds, target, reduction="none")
        self.mean_value.add_(losses.sum().to(self.mean_value.dtype))  # in place: no Module.__setattr__ per batch
        self.weight.add_(losses.numel())
