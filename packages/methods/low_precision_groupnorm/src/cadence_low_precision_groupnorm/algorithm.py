"""`LowPrecisionGroupNorm`: the Event adapter over `apply_low_precision_groupnorm`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, Event, NotApplicableError, Resource, State
from cadence.ops import SurgeryMethod, SurgeryReport
from cadence_low_precision_groupnorm.functional import apply_low_precision_groupnorm

__all__ = ["LowPrecisionGroupNorm"]


class LowPrecisionGroupNorm(SurgeryMethod):
    """Replaces GroupNorm by `LPGroupNorm` on INIT when the run trains under autocast (amp_bf16/amp_fp16).

    See `apply_low_precision_groupnorm`; with ``precision='fp32'`` it changes nothing and says so.
    """

    order = 50  # touches GroupNorm only: independent of the convolution surgeries (Factorize 10, WS 90)

    def __init__(self, *, strict: bool = False):
        super().__init__(strict=strict)
        self._precision: str | None = None

    def apply(self, event: Event, state: State, logger: Any) -> None:
        self._precision = state.precision.value  # the surgery depends on the run's precision
        super().apply(event, state, logger)

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_low_precision_groupnorm(model, self._precision, optimizers, strict=self.strict)

    def effects(self) -> Effects:
        return Effects(writes={Resource.MODEL})  # the GroupNorm parameters stay the same objects

    def check_applicable(self, model: Any, batch: Any) -> None:
        if not any(isinstance(m, nn.GroupNorm) for m in model.modules()):
            raise NotApplicableError(
                f"{self.name} replaces torch.nn.GroupNorm layers, and {type(model).__name__} has none; "
                "drop the method for this model"
            )
