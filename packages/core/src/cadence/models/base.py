"""`Model`: the interface the trainer trains (Composer's ``ComposerModel``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

__all__ = ["Model"]


class Model(nn.Module, ABC):
    """A `torch.nn.Module` that knows its loss and its metrics.

    Subclasses implement ``forward(batch)`` (the whole dataloader batch goes in) and
    ``loss(outputs, batch)``. The loss may be a tensor, a sequence of tensors (summed),
    or a dict with a ``"total"`` entry.
    """

    @abstractmethod
    def forward(self, batch: Any) -> Any:
        """Compute outputs from a whole batch."""

    @abstractmethod
    def loss(self, outputs: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        """Compute the training loss from outputs and the batch."""

    def eval_forward(self, batch: Any, outputs: Any | None = None) -> Any:
        """Outputs used for evaluation metrics; `outputs` lets a caller reuse a forward already run."""
        return outputs if outputs is not None else self.forward(batch)

    def get_metrics(self, is_train: bool = False) -> dict[str, Any]:
        """Fresh torchmetrics ``Metric`` objects by name (the trainer copies them per loader)."""
        del is_train
        return {}

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}.get_metrics returned metrics, so it must implement update_metric"
        )


def total_loss(loss: Any) -> torch.Tensor:
    """Reduce what ``Model.loss`` returned to the one tensor to back-propagate."""
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(loss, dict):
        if "total" in loss:
            return loss["total"]
        return sum(loss.values())  # type: ignore[return-value]
    if isinstance(loss, (list, tuple)):
        return sum(loss)  # type: ignore[return-value]
    raise TypeError(f"Model.loss returned a {type(loss).__name__}; return a tensor, a sequence, or a dict")
