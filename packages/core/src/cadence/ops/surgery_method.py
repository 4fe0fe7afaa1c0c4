"""`SurgeryMethod`: the base of methods that change the model's structure (BlurPool, SqueezeExcite, ...).

The surgery runs once, at INIT: after the optimizers exist (they are rebound, keeping their state)
and before a checkpoint is loaded and DDP wraps the model. The method logs its report, beside it
the hyperparameters Composer logs for the same surgery (`composer_hyperparameters`, so dashboards
built on Composer's names keep working), and a
checkpoint records every surgery method with its arguments (``required_on_load``): loading it
into a run that does not apply the same surgery is refused, naming the method to add.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn

from cadence.algorithm import Effects, Resource
from cadence.event import Event
from cadence.ops.checks import check_bool
from cadence.ops.method import Method
from cadence.ops.surgery import SurgeryReport, unwrap_model
from cadence.state import State

__all__ = ["SurgeryMethod"]


class SurgeryMethod(Method):
    """Subclasses implement `surgery` (usually their functional ``apply_<x>``) and call
    ``super().__init__(strict=strict)``; ``strict=True`` turns "changed nothing" into an error."""

    events: ClassVar[tuple[Event, ...]] = (Event.INIT,)
    runtime_arguments: ClassVar[frozenset[str]] = frozenset({"strict"})
    """Arguments that do not shape the model: a checkpoint does not hold a resumed run to them."""

    def __init__(self, *, strict: bool = False):
        self.strict = check_bool("strict", strict, "True: changing no module is an error, not a warning")
        self.report: SurgeryReport | None = None

    @staticmethod
    def required_on_load() -> bool:
        return True

    def structure_hparams(self) -> dict[str, Any]:
        return {k: v for k, v in self.hparams().items() if k not in self.runtime_arguments}

    @abstractmethod
    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        """Change `model` in place (rebinding `optimizers`) and report what changed."""

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        """What Composer's version of this method logs after its surgery, one dict per
        ``log_hyperparameters`` call it makes (``[{"blurpool/num_blurconv_layers": 8, ...}]``, counted in
        `model`); [] where Composer logs none."""
        return []

    def apply(self, event: Event, state: State, logger: Any) -> None:
        self.report = self.surgery(state.model, state.optimizers)
        for logged in self.composer_hyperparameters(unwrap_model(state.model)):
            logger.log_hyperparameters(logged)  # Composer's calls first, as Composer makes them
        if self.report:
            logger.log_hyperparameters(self.report.hyperparameters())  # then cadence's report, in its own call

    def effects(self) -> Effects:
        return Effects(writes={Resource.MODEL, Resource.OPTIMIZER})
