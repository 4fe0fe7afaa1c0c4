"""`LowPrecisionLayerNorm`: the Event adapter over `apply_low_precision_layernorm`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Event, Precision, State
from cadence.ops import SurgeryMethod, SurgeryReport, check_choice
from cadence_low_precision_layernorm.functional import apply_low_precision_layernorm

__all__ = ["LowPrecisionLayerNorm"]

APPLY_AT = (Event.INIT.value, Event.BEFORE_LOAD.value, Event.AFTER_LOAD.value)


class LowPrecisionLayerNorm(SurgeryMethod):
    """Replaces every `torch.nn.LayerNorm` by an `LPLayerNorm` on `apply_at` (see `apply_low_precision_layernorm`).

    ``apply_at`` is ``"init"`` (default), ``"before_load"`` or ``"after_load"`` (an `Event` works too),
    as in Composer. In an fp32 run it changes nothing and warns `NoEffectWarning` (``strict``: raises).
    """

    events = (Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD)  # match: the one named by apply_at
    order = 50  # after GatedLinearUnits (-20) on INIT, so that the LayerNorms GLU creates are converted

    def __init__(self, apply_at: Event | str = Event.INIT, *, strict: bool = False):
        value = getattr(apply_at, "value", apply_at)
        self.apply_at = check_choice("apply_at", value, APPLY_AT, "surgery runs before training starts")
        super().__init__(strict=strict)
        self._precision: Precision | None = None

    def match(self, event: Event, state: State) -> bool:
        return event.value == self.apply_at

    def apply(self, event: Event, state: State, logger: Any) -> None:
        self._precision = state.precision  # `surgery` receives only the model and the optimizers
        super().apply(event, state, logger)

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_low_precision_layernorm(model, self._precision, optimizers, strict=self.strict)
