"""`GyroDropout`: the Event adapter over `apply_gyro_dropout` (surgery on INIT, sized by the run's length), which
then drives the layers by optimizer steps (BATCH_START) and places each microbatch in its step (BEFORE_FORWARD)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, Event, Resource, State
from cadence.ops import RandomMethod, SurgeryMethod, SurgeryReport, batch_num_samples
from cadence_gyro_dropout.functional import apply_gyro_dropout, check_gyro_dropout_args
from cadence_gyro_dropout.layers import GyroDropoutLayer

__all__ = ["GyroDropout"]


class GyroDropout(SurgeryMethod, RandomMethod):
    """Replaces the ``nn.Dropout`` layers by `GyroDropoutLayer`s on INIT (arguments as in `apply_gyro_dropout`).

    ``iters_per_epoch`` and ``max_epoch`` come from the run (its loader's length and max_duration,
    as Composer's on FIT_START). Both bases: a surgery recorded in checkpoints, and a method with
    its own generator (on the training device, seeded by ``seed`` or the run), which it hands to
    the layers; its state and the layers' masks and step counts are checkpointed, so a resumed run
    continues with the same sub-networks and draws.

    The layers count optimizer steps, not forwards: on BATCH_START it begins a step in every
    `GyroDropoutLayer` of the model (`GyroDropoutLayer.start_step`, with the batch's size), and on
    BEFORE_FORWARD it tells them where the microbatch starts in the batch, so every microbatch and
    SAM's second pass use the step's masks, and each sample the mask it would have in the unsplit
    batch. Composer counts forwards: with k microbatches its schedule runs k times too fast.
    """

    events = (Event.INIT, Event.BATCH_START, Event.BEFORE_FORWARD)
    # INIT: after the surgeries that build blocks holding dropout (GatedLinearUnits, -20), before those at 10 and
    # up, which touch no dropout; distinct from StochasticDepth's 0 at BATCH_START (neither reads what the other sets)
    order = 5
    generators = {"gyro_dropout": "device"}

    def __init__(
        self, p: float = 0.5, sigma: int = 256, tau: int = 16, *, seed: int | None = None, strict: bool = False
    ):
        check_gyro_dropout_args(p, sigma, tau)
        SurgeryMethod.__init__(self, strict=strict)
        RandomMethod.__init__(self, seed=seed)
        self.p, self.sigma, self.tau = p, sigma, tau
        self._run_length: tuple[int, float] = (1, 1.0)
        self._layers: list[GyroDropoutLayer] | None = None  # found on the first step, after every INIT surgery
        self._step_samples = 0  # samples in this step's batch
        self._next_row = 0  # where the next microbatch starts in it
        self._microbatch_size: int | None = None  # the trainer's, when the pass began

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.BATCH_START:
            return self._start_step(state)
        if event is Event.BEFORE_FORWARD:
            return self._place_microbatch(state)
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

    def _start_step(self, state: State) -> None:
        if self._layers is None:
            self._layers = [m for m in state.model.modules() if isinstance(m, GyroDropoutLayer)]
        self._step_samples, self._next_row = batch_num_samples(state.batch), 0
        self._microbatch_size = state.device_train_microbatch_size
        for layer in self._layers:
            layer.start_step(self._step_samples)

    def _place_microbatch(self, state: State) -> None:
        samples, size = batch_num_samples(state.batch), state.device_train_microbatch_size
        if self._next_row + samples > self._step_samples or size != self._microbatch_size:
            # a new pass over the step's batch: SAM's second, or the batch again in smaller microbatches ("auto")
            self._next_row, self._microbatch_size = 0, size
        for layer in self._layers or ():
            layer.microbatch_offset = self._next_row
        self._next_row += samples

    def effects(self) -> Effects:
        # dropout layers own no parameters (optimizers are untouched); the masks are spread over the run's epochs
        return Effects(reads={Resource.DURATION}, writes={Resource.MODEL})
