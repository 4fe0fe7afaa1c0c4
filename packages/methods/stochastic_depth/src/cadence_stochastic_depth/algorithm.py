"""`StochasticDepth`: the Event adapter over `apply_stochastic_depth` (surgery at INIT, warm-up at BATCH_START)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, Event, Resource, State, Time, TimeUnit
from cadence.ops import RandomMethod, SurgeryMethod, SurgeryReport, check_time, unwrap_model
from cadence_stochastic_depth.functional import apply_stochastic_depth, check_stochastic_depth_args, set_drop_rates
from cadence_stochastic_depth.layers import is_stochastic

__all__ = ["StochasticDepth"]


class StochasticDepth(SurgeryMethod, RandomMethod):
    """Makes residual blocks stochastic on INIT (see `apply_stochastic_depth`); during ``drop_warmup`` their
    rates grow linearly with the batches trained, set on BATCH_START. Logs Composer's metrics
    ``stochastic_depth/num_stochastic_layers`` (INIT) and ``stochastic_depth/drop_rate`` (each warm-up batch).

    Arguments as in `apply_stochastic_depth`; ``drop_warmup`` is a `Time` (``'0.1dur'``, ``'500ba'``,
    ``'2ep'``; a float is a fraction of the run), ``seed`` fixes the drops' generators and ``strict``
    makes "no block matched" an error. Both bases: a surgery recorded in checkpoints, and a method
    with its own generators (block drops on the host, sample masks on the device) whose states
    are checkpointed, so a resumed run drops the same blocks.
    """

    events = (Event.INIT, Event.BATCH_START)
    order = 0  # wraps whole blocks; other surgeries replace layers inside them, which the wrapper calls by name
    generators = {"blocks": "cpu", "samples": "device"}

    def __init__(
        self,
        target_layer_name: str | type[nn.Module] = "ResNetBlock",
        stochastic_method: str = "block",
        drop_rate: float = 0.2,
        drop_distribution: str = "linear",
        drop_warmup: str | float | Time = "0.0dur",
        *,
        seed: int | None = None,
        strict: bool = False,
    ):
        check_stochastic_depth_args(target_layer_name, stochastic_method, drop_rate, drop_distribution)
        self._warmup = check_time("drop_warmup", drop_warmup, (TimeUnit.DURATION, TimeUnit.BATCH, TimeUnit.EPOCH))
        SurgeryMethod.__init__(self, strict=strict)
        RandomMethod.__init__(self, seed=seed)
        self.target_layer_name, self.stochastic_method = target_layer_name, stochastic_method
        self.drop_rate, self.drop_distribution, self.drop_warmup = drop_rate, drop_distribution, drop_warmup

    @property
    def find_unused_parameters(self) -> bool:
        return self.stochastic_method == "block"  # a dropped block's parameters get no gradient in that step

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT or (event is Event.BATCH_START and self._warmup.value > 0)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.setup_generators(state)
            super().apply(event, state, logger)  # the surgery
            count = sum(is_stochastic(m) for m in unwrap_model(state.model).modules())
            logger.log_metrics({"stochastic_depth/num_stochastic_layers": count})  # Composer's key and kind
        if self._warmup.value > 0:  # the rates for the batch about to train (0 before the first)
            done = state.timestamp.batch / max(state.to_batches(self._warmup), 1)
            count = set_drop_rates(state.model, min(done, 1.0) * self.drop_rate, self.drop_distribution)
            if event is Event.BATCH_START and count:
                logger.log_metrics({"stochastic_depth/drop_rate": min(done, 1.0) * self.drop_rate})  # Composer's

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        generator = self.generator("blocks" if self.stochastic_method == "block" else "samples")
        args = (self.target_layer_name, self.stochastic_method, self.drop_rate, self.drop_distribution)
        return apply_stochastic_depth(model, *args, generator=generator, strict=self.strict)

    def effects(self) -> Effects:
        warms_by_fraction = self._warmup.unit is TimeUnit.DURATION and self._warmup.value > 0
        reads = {Resource.DURATION} if warms_by_fraction else set()
        # the blocks keep their parameters: optimizers are untouched
        return Effects(reads=reads, writes={Resource.MODEL})
