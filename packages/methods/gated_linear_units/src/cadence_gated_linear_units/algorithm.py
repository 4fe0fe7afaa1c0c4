"""`GatedLinearUnits`: the Event adapter over `apply_gated_linear_units`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cadence import NotApplicableError
from cadence.ops import SurgeryMethod, SurgeryReport
from cadence_gated_linear_units.functional import (
    apply_gated_linear_units,
    check_gated_linear_units_args,
    check_gated_linear_units_model,
)

__all__ = ["GatedLinearUnits"]


class GatedLinearUnits(SurgeryMethod):
    """Replaces the feed-forward blocks by gated linear units on INIT (see `apply_gated_linear_units`)."""

    # Before Low-Precision LayerNorm (50) on INIT, where lower orders run first: every LayerNorm of the
    # final model, those in the gated blocks included, is then converted (Composer orders them so too).
    order = -20

    def __init__(
        self,
        act_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
        *,
        strict: bool = False,
    ):
        check_gated_linear_units_args(act_fn, gated_layer_bias, non_gated_layer_bias)
        super().__init__(strict=strict)
        self.act_fn, self.gated_layer_bias, self.non_gated_layer_bias = act_fn, gated_layer_bias, non_gated_layer_bias

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        args = (self.act_fn, self.gated_layer_bias, self.non_gated_layer_bias)
        return apply_gated_linear_units(model, optimizers, *args, strict=self.strict)

    def hparams(self) -> dict[str, Any]:
        """`act_fn` by name when it is a function: checkpoints compare the hyperparameters they record, and
        a function's repr holds its memory address, which differs in the process that resumes."""
        params = super().hparams()
        function = self.act_fn
        if function is not None and not isinstance(function, nn.Module):
            name = getattr(function, "__qualname__", type(function).__qualname__)
            params["act_fn"] = f"{getattr(function, '__module__', None) or type(function).__module__}.{name}"
        return params

    def check_applicable(self, model: Any, batch: Any) -> None:
        try:
            check_gated_linear_units_model(model)
        except ValueError as error:
            raise NotApplicableError(f"{self.name} does not apply: {error}") from None
