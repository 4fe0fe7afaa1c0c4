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
    """Mean cross-entropy over every sample seen (exact across batches and ranks); dense targets welcome."""

    accepts_dense_targets = True

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[override]
        super().update(soft_cross_entropy(preds, target, reduction="none"))
