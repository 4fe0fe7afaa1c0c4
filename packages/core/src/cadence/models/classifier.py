"""`Classifier`: wraps an image (or any) classification module into a `Model`."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cadence.models.base import Model
from cadence.ops.targets import soft_cross_entropy

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["Classifier"]


class Classifier(Model):
    """``Classifier(module, num_classes)``: batches are ``(input, target)`` pairs.

    Args:
        module: maps inputs to logits.
        num_classes: the module's ``num_classes`` when it has one (a different value warns), else required
            unless both `train_metrics` and `val_metrics` are given (the default accuracy needs it).
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
        own = getattr(module, "num_classes", None)
        if isinstance(own, int) and num_classes is not None and num_classes != own:
            warnings.warn(
                f"num_classes={num_classes} does not match module.num_classes={own}; using {own}", stacklevel=2
            )
        num_classes = own if isinstance(own, int) else num_classes  # the module's own count wins, as in Composer
        metrics_given = train_metrics is not None and val_metrics is not None  # then the count is not needed
        if not (num_classes is None and metrics_given) and (not isinstance(num_classes, int) or num_classes < 2):
            raise ValueError(
                f"num_classes={num_classes!r}: pass an int >= 2 (it could not be read from module.num_classes), "
                "or both train_metrics and val_metrics"
            )
        self.module = module
        self.num_classes = num_classes
        self.loss_fn = loss_fn
        self._train_metrics = dict(train_metrics) if train_metrics is not None else None
        self._val_metrics = dict(val_metrics) if val_metrics is not None else None

    def forward(self, batch: tuple[torch.Tensor, Any]) -> torch.Tensor:
        """Logits of ``batch[0]``. The annotation is Composer's: it lets ``torch.jit.script`` compile the
        model (a scripted model takes a tuple; eager mode takes any pair, such as a data loader's list)."""
        inputs, _ = batch
        return self.module(inputs)

    def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        _, targets = batch
        return self.loss_fn(outputs, targets, *args, **kwargs)

    def get_metrics(self, is_train: bool = False) -> dict[str, Metric]:
        chosen = self._train_metrics if is_train else self._val_metrics
        if chosen is not None:
            return {name: copy.deepcopy(metric) for name, metric in chosen.items()}
        from cadence.metrics import CrossEntropy, MulticlassAccuracy  # lazily: see cadence.metrics

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
        metric.update(outputs.detach() if outputs.requires_grad else outputs, targets)  # evaluation: no graph, no op
