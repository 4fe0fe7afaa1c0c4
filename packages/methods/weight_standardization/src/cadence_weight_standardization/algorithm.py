"""`WeightStandardization`: the Event adapter over `standardize_conv_weights`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, NotApplicableError, Resource
from cadence.ops import SurgeryMethod, SurgeryReport
from cadence_weight_standardization.functional import (
    CONVOLUTIONS,
    check_weight_standardization_args,
    standardize_conv_weights,
)

__all__ = ["WeightStandardization"]


class WeightStandardization(SurgeryMethod):
    """Standardizes the convolution weights on INIT (see `apply_weight_standardization`).

    Recorded in checkpoints: the state-dict keys of standardized weights change, so a checkpoint
    loads into a fresh model only when the run applies the same method first.
    """

    order = 90  # after the surgeries that build convolutions (Factorize, BlurPool, SqueezeExcite): it sees them all

    def __init__(self, n_last_layers_ignore: int = 0, *, strict: bool = False):
        check_weight_standardization_args(n_last_layers_ignore)
        super().__init__(strict=strict)
        self.n_last_layers_ignore = n_last_layers_ignore

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        del optimizers  # the parameters stay the same objects: nothing to rebind
        return standardize_conv_weights(model, self.n_last_layers_ignore, strict=self.strict)

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        return [{"WeightStandardization/num_weights_standardized": self.report.count if self.report else 0}]

    def effects(self) -> Effects:
        return Effects(writes={Resource.MODEL})  # the optimizer keeps its parameters and their state

    def check_applicable(self, model: Any, batch: Any) -> None:
        if not any(isinstance(m, CONVOLUTIONS) for m in model.modules()):
            raise NotApplicableError(
                f"{self.name} standardizes convolution weights, and {type(model).__name__} has no Conv1d/2d/3d; "
                "drop the method for this model"
            )
