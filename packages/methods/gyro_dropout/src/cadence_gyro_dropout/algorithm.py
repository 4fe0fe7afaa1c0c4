"""`GyroDropout`: the Event adapter over `apply_gyro_dropout` (surgery on INIT, sized by the run's length)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, Event, Resource, State
from cadence.ops import RandomMethod, SurgeryMethod, SurgeryReport
from cadence_gyro_dropout.functional import apply_gyro_dropout, check_gyro_dropout_args

__all__ = ["GyroDropout"]


class GyroDropout(SurgeryMethod, RandomMethod):
    """Replaces the ``nn.Dropout`` layers by `GyroDropoutLayer`s on INIT (arguments as in `apply_gyro_dropout`).

    ``iters_per_epoch`` and ``max_epoch`` come from the run (its loader's length and max_duration,
    as Composer's on FIT_START). Both bases: a surgery recorded in checkpoints, and a method with
    its own generator (on the training device, seeded by ``seed`` or the run), which it hands to
    the layers; its state and the layers' masks are checkpointed, so a resumed run continues with
    the same sub-networks and draws.
    """

    events = (Event.INIT,)
    order = 0  # replaces dropout layers only: no other surgery touches them
    generators = {"gyro_dropout": "device"}

    def __init__(
        self, p: float = 0.5, sigma: int = 256, tau: int = 16, *, seed: int | None = None, strict: bool = False
    ):
        check_gyro_dropout_args(p, sigma, tau)
        SurgeryMethod.__init__(self, strict=strict)
        RandomMethod.__init__(self, seed=seed)
        self.p, self.sigma, self.tau = p, sigma, tau
        self._run_length: tuple[int, float] = (1, 1.0)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        total = state.max_batches
        if total is None:
            raise ValueError(
                "GyroDropout spreads its masks over the run: give max_duration in ep (with a sized loader) or ba, "
                f"not {state.max_duration}"
            )
        steps_per_epoch = state.dataloader_len or total
        self._run_length = (steps_per_epoch, total / steps_per_epoch)
        self.setup_generators(state)
        super().apply(event, state, logger)  # the surgery

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        generator = self.generator("gyro_dropout")
        return apply_gyro_dropout(
            model, *self._run_length, self.p, self.sigma, self.tau, generator=generator, strict=self.strict
        )

    def effects(self) -> Effects:
        # dropout layers own no parameters (optimizers are untouched); the masks are spread over the run's epochs
        return Effects(reads={Resource.DURATION}, writes={Resource.MODEL})
