"""`Classifier`: wraps an image (or any) classification module into a `Model`."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from cadence.models.base import Model

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["Classifier", "ensure_targets_one_hot", "soft_cross_entropy"]


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


class Classifier(Model):
    """``Classifier(module, num_classes)``: batches are ``(input, target)`` pairs.

    Args:
        module: maps inputs to logits.
        num_classes: taken from ``module.num_classes`` when omitted.
        train_metrics, val_metrics: metrics by name; default accuracy (and cross-entropy on eval).
        loss_fn: ``loss_fn(logits, target, **kwargs)``; the default accepts dense targets.
    """

    def __init__(
        self,
        module: nn.Module,
        num_classes: int | None = None,
        train_metrics: Mapping[str, Metric] | None = None,
        val_metrics: Mapping[str, Metric] | None = None,
        loss_fn: Callable[..., torch.Tensor] = soft_cross_entropy,
    ):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        num_classes = num_classes if num_classes is not None else getattr(module, "num_classes", None)
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                f"num_classes={num_classes!r}: pass an int >= 2 (it could not be read from module.num_classes)"
            )
        self.module = module
        self.num_classes = num_classes
        self.loss_fn = loss_fn
        self._train_metrics = dict(train_metrics) if train_metrics is not None else None
        self._val_metrics = dict(val_metrics) if val_metrics is not None else None

    def forward(self, batch: Any) -> torch.Tensor:
        inputs, _ = batch
        return self.module(inputs)

    def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        _, targets = batch
        return self.loss_fn(outputs, targets, *args, **kwargs)

    def get_metrics(self, is_train: bool = False) -> dict[str, Metric]:
        chosen = self._train_metrics if is_train else self._val_metrics
        if chosen is not None:
            return {name: copy.deepcopy(metric) for name, metric in chosen.items()}
        from torchmetrics.classification import MulticlassAccuracy  # lazily: see cadence.metrics

        from cadence.metrics import CrossEntropy

        metrics: dict[str, Metric] = {
            "MulticlassAccuracy": MulticlassAccuracy(num_classes=self.num_classes, average="micro")
        }
        if not is_train:
            metrics["CrossEntropy"] = CrossEntropy()
        return metrics

    def update_metric(self, batch: Any, outputs: torch.Tensor, metric: Metric) -> None:
        _, targets = batch
        dense = targets.is_floating_point() and targets.shape == outputs.shape
        if dense and not getattr(metric, "accepts_dense_targets", False):
            targets = targets.argmax(dim=1)  # dense (mixed/smoothed) targets: score against the main class
        metric.update(outputs.detach(), targets)
