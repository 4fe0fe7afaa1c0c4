"""`RunSchedules`: a run's optimizers' schedules, as the trainer steps and replaces them."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from cadence._arguments import as_list
from cadence.schedulers import Scheduler, compile_schedulers
from cadence.state import State

__all__ = ["RunSchedules"]


class RunSchedules:
    """The schedulers given by the user, compiled on ``state.optimizers`` (also set as ``state.schedulers``).

    cadence schedulers step every batch and torch ``LRScheduler``s every epoch; `replace` swaps the
    optimizers and/or schedulers between ``fit`` calls (Composer's ``fit(optimizers=, schedulers=)``).
    """

    def __init__(self, state: State, schedulers: list[Any]):
        self.state = state
        self.given = schedulers
        self.compiled = compile_schedulers(schedulers, state)

    def replace(self, optimizers: Any, schedulers: Any) -> None:
        """New optimizers take the cadence schedulers along; a torch scheduler is bound to its optimizer, so
        new optimizers without new schedulers are refused when one is in use."""
        if optimizers is not None:
            bound = [s for s in self.given if isinstance(s, LRScheduler)]
            if bound and schedulers is None:
                raise ValueError(
                    f"fit(optimizers=...) replaces the optimizers, and {type(bound[0]).__name__} is bound to the old "
                    "one; pass schedulers=... built on the new optimizers too"
                )
            self.state.optimizers = as_list(optimizers, "optimizers", torch.optim.Optimizer)
        if schedulers is not None:
            self.given = as_list(schedulers, "schedulers", (Scheduler, LRScheduler))
        self.compiled = compile_schedulers(self.given, self.state)

    def step(self, every_batch: bool) -> None:
        """Step the schedulers of the batch (True) or of the epoch (False)."""
        for scheduler, steps_every_batch in self.compiled:
            if steps_every_batch is every_batch:
                scheduler.step()

    def learning_rates(self) -> dict[str, float]:
        """``lr-<Optimizer>/group<i>`` -> the group's current learning rate (logged every batch)."""
        rates = {}  # a loop, not a comprehension: no extra frame every batch
        for optimizer in self.state.optimizers:
            name = type(optimizer).__name__
            for i, group in enumerate(optimizer.param_groups):
                rates[f"lr-{name}/group{i}"] = group["lr"]
        return rates
