"""Metrics cadence adds to torchmetrics, and the default classification metrics made cheap per batch.

Imported on first use (``Classifier.get_metrics``): ``import torchmetrics`` also imports
torchvision and transformers when they are installed, which ``import cadence`` avoids.

An evaluation updates every metric once per batch, on the host's critical path while a GPU waits for
the next forward. torchmetrics spends most of that time outside the arithmetic: each update sets
bookkeeping attributes through ``nn.Module.__setattr__`` (which checks every value against parameters,
buffers and submodules), and `MulticlassAccuracy` computes its four statistics through general code
with many small reshapes. The classes here keep torchmetrics' states, ``compute``, ``reset`` and
distributed sync unchanged and only make the update cheaper, with identical results.
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics.aggregation import MeanMetric
from torchmetrics.classification import MulticlassAccuracy as _TorchmetricsMulticlassAccuracy

from cadence.ops.targets import soft_cross_entropy

__all__ = ["CrossEntropy", "MulticlassAccuracy"]

# Values that can never become a parameter, buffer or submodule when assigned (exact types: a Parameter is not).
_PLAIN_VALUES = frozenset({type(None), bool, int, float, torch.Tensor})


class _PlainAttributes:
    """Stores an attribute that already is a plain one, set to a plain value, directly.

    That is what ``nn.Module.__setattr__`` ends up doing for it, after about ten checks; torchmetrics sets two
    such attributes on every update (``_computed``, ``_update_count``) and its states often more. Anything
    else (a new name, a parameter, a module, a buffer) takes the usual path.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if type(value) in _PLAIN_VALUES and name in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


class CrossEntropy(_PlainAttributes, MeanMetric):
    """Mean cross-entropy over every sample seen (exact across batches and ranks); dense targets welcome.

    Sums on the device: `MeanMetric`'s own update checks for NaNs with a host sync per batch; here a NaN
    loss makes the mean NaN (which it is)."""

    accepts_dense_targets = True

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[override]
        self.mean_value.add_(soft_cross_entropy(preds, target, reduction="sum"))  # in place: no __setattr__
        self.weight.add_(preds.numel() // preds.shape[1] if preds.ndim > 1 else 1)  # the losses summed: one a sample


class MulticlassAccuracy(_PlainAttributes, _TorchmetricsMulticlassAccuracy):
    """torchmetrics' `MulticlassAccuracy`, with a direct update for its most common use.

    With ``average="micro"``, ``top_k=1``, ``multidim_average="global"``, no ``ignore_index``, input checks
    off (the trainer's evaluation turns them off after the first batch), logits ``(N, C)`` and class indices
    ``(N,)``, the four statistics follow from the number of correct predictions: ``tp`` = correct, ``fp`` =
    ``fn`` = wrong, ``tn`` = ``N * C - tp - fp - fn`` (what torchmetrics' general code computes). They are
    added in place, on the device. Any other configuration or input takes torchmetrics' own update.
    """

    tp: torch.Tensor  # torchmetrics' states: with multidim_average="global", one tensor each
    fp: torch.Tensor
    fn: torch.Tensor
    tn: torch.Tensor
    num_classes: int  # required by the multiclass metrics (torchmetrics' base types it Optional)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[override]
        if not (
            self.average == "micro"
            and self.top_k == 1
            and self.multidim_average == "global"
            and self.ignore_index is None
            and not self.validate_args
            and preds.ndim == 2
            and target.ndim == 1
            and preds.is_floating_point()
            and not target.is_floating_point()
        ):
            super().update(preds, target)
            return
        correct = (preds.argmax(dim=1) == target).sum()
        wrong = torch.rsub(correct, target.numel())  # numel - correct, without Tensor.__rsub__'s Python wrapper
        self.tp.add_(correct)
        self.fp.add_(wrong)
        self.fn.add_(wrong)
        self.tn.sub_(wrong).add_(target.numel() * (self.num_classes - 1))  # N*C - tp - fp - fn = N*(C-1) - wrong
