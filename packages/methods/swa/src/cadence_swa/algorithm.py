"""`SWA`: the Event adapter over the averaging, the SWA learning rate and the BatchNorm recomputation."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import Any, cast

import torch

from cadence import Effects, Event, Resource, State, Time, TimeUnit
from cadence.ops import Method, autocast_context, check_time
from cadence_swa.functional import (
    average_weights,
    check_swa_args,
    load_weights,
    recompute_bn_statistics,
    swa_learning_rate,
    swa_weights,
    training_batches,
    use_learning_rates,
)

__all__ = ["SWA", "check_swa_times"]


class SWA(Method):
    """Averages the weights (`average_weights`) on BATCH_END or EPOCH_END (the unit of `update_interval`) from
    `swa_start` on; at `swa_end`, or at the run's last event if that comes first, loads the average into
    the model (`load_weights`) and recomputes its BatchNorm statistics on the training data
    (`recompute_bn_statistics`: one epoch replayed, on the device, in microbatches, under the run's precision),
    before that event's evaluation and checkpoint. Training goes on from the averaged weights until
    max_duration. Arguments as in Composer's SWA (`check_swa_times`, `check_swa_args`).

    With ``schedule_swa_lr``, every optimizer step inside the window uses `swa_learning_rate`, through
    `use_learning_rates`: the trainer's schedulers keep stepping underneath, untouched.
    """

    events = (Event.AFTER_LOAD, Event.FIT_START, Event.BATCH_END, Event.EPOCH_END, Event.FIT_END)
    order = 200  # last on BATCH_END and EPOCH_END: it samples (and replaces) weights the other methods have finished

    def __init__(
        self,
        swa_start: str | float | Time = "0.7dur",
        swa_end: str | float | Time = "0.97dur",
        update_interval: str | Time = "1ep",
        schedule_swa_lr: bool = False,
        anneal_strategy: str = "linear",
        anneal_steps: int = 10,
        swa_lr: float | None = None,
    ):
        self._start, self._end, every = check_swa_times(swa_start, swa_end, update_interval)
        self._strategy = check_swa_args(schedule_swa_lr, anneal_strategy, anneal_steps, swa_lr)
        self.swa_start, self.swa_end, self.update_interval = swa_start, swa_end, update_interval
        self.schedule_swa_lr, self.anneal_strategy, self.anneal_steps, self.swa_lr = (
            schedule_swa_lr, anneal_strategy, anneal_steps, swa_lr)  # fmt: skip
        self._every, self._update_event = int(every.value), _EVENT_OF[every.unit]
        self._averaged: dict[str, torch.Tensor] = {}  # the average while the window is open
        self.swa_started = self.swa_completed = False
        self.num_averaged = self.step_counter = 0  # samples averaged; update events seen since swa_start
        self._initial_lrs: list[list[float]] = []  # per optimizer and group, when the window opened
        self._hooks: list[Any] = []  # the step hooks that apply the SWA rate (between FIT_START and FIT_END)

    def match(self, event: Event, state: State) -> bool:
        return event in self.events and not (self.swa_completed and event in (Event.BATCH_END, Event.EPOCH_END))

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.AFTER_LOAD:  # checkpoints load on the CPU
            self._averaged = {name: value.to(state.device) for name, value in self._averaged.items()}
        elif event is Event.FIT_START and self.schedule_swa_lr:  # optimizers are final from FIT_START on
            for index, optimizer in enumerate(state.optimizers):
                self._hooks += use_learning_rates(optimizer, functools.partial(self._swa_rates, index))
        elif event is Event.FIT_END:
            for hook in self._hooks:
                hook.remove()
            self._hooks = []
            if not self.swa_started:
                warnings.warn(f"SWA never averaged: the run ended before swa_start={self.swa_start!r}", stacklevel=2)
        else:
            due = event is self._update_event
            if due and self._reached(state, self._start):
                self._sample(state)
            if self.swa_started and ((due and self._reached(state, self._end)) or self._run_ends(event, state)):
                self._finish(state, logger)

    def _sample(self, state: State) -> None:
        if not self.swa_started:
            self.swa_started = True
            self._initial_lrs = [[group["lr"] for group in opt.param_groups] for opt in state.optimizers]
        if self.step_counter % self._every == 0:
            if self.num_averaged == 0:
                self._averaged = swa_weights(state.model)
            else:
                average_weights(self._averaged, state.model, self.num_averaged)
            self.num_averaged += 1
        self.step_counter += 1

    def _finish(self, state: State, logger: Any) -> None:
        """The average replaces the training weights, with BatchNorm statistics recomputed for it."""
        load_weights(state.model, self._averaged)
        epoch = state.timestamp.epoch
        loader = cast(Iterable[Any], state.dataloader)  # set: this runs on a training event
        batches = training_batches(loader, epoch, state.device, state.device_train_microbatch_size)
        with autocast_context(state.precision, state.device):
            recompute_bn_statistics(state.model, batches)
        self._averaged, self.swa_completed = {}, True
        logger.log_metrics({"swa/num_averaged": self.num_averaged})

    def _reached(self, state: State, time: Time) -> bool:
        if time.unit is TimeUnit.DURATION:
            elapsed = state.get_elapsed_duration()
            return elapsed is not None and elapsed.value >= time.value
        return state.timestamp.get(time.unit) >= time.value

    def _run_ends(self, event: Event, state: State) -> bool:
        """The run ends here, and none of this method's update events comes before its final evaluation."""
        epoch_length = state.dataloader_len
        epoch_end_follows = bool(epoch_length and state.timestamp.batch_in_epoch >= epoch_length)
        return state.is_done() and not (
            event is Event.BATCH_END and self._update_event is Event.EPOCH_END and epoch_end_follows
        )

    def _swa_rates(self, index: int) -> list[float] | None:
        """The rates of optimizer `index`'s groups for this step: SWA's inside the window, else theirs (None)."""
        if not self.swa_started or self.swa_completed:
            return None
        args = (self.swa_lr, self.num_averaged, self.anneal_steps, self._strategy)
        return [swa_learning_rate(initial, *args) for initial in self._initial_lrs[index]]

    def state_dict(self) -> dict[str, Any]:
        names = ("num_averaged", "step_counter", "swa_started", "swa_completed")
        return {"averaged": self._averaged, "initial_lrs": self._initial_lrs, **{n: getattr(self, n) for n in names}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._averaged, self._initial_lrs = dict(state["averaged"]), [list(lrs) for lrs in state["initial_lrs"]]
        self.num_averaged, self.step_counter = state["num_averaged"], state["step_counter"]
        self.swa_started, self.swa_completed = state["swa_started"], state["swa_completed"]

    def effects(self) -> Effects:
        fix = "use one of them (SWA averages a window late in training, EMA averages all along from ema_start)"
        writes = {Resource.WEIGHTS, Resource.SCHEDULE} if self.schedule_swa_lr else {Resource.WEIGHTS}
        reads = {Resource.WEIGHTS, Resource.DATA, Resource.DURATION}  # its window, and its finish at the run's end
        return Effects(reads=reads, writes=writes, conflicts={"EMA": fix})


_EVENT_OF = {TimeUnit.BATCH: Event.BATCH_END, TimeUnit.EPOCH: Event.EPOCH_END}


def check_swa_times(swa_start: Any, swa_end: Any, update_interval: Any) -> tuple[Time, Time, Time]:
    """SWA's times, each refused naming it: `swa_start` < `swa_end`, both in dur (a float is a fraction of the
    run), ep or ba and in the same unit; `update_interval` a whole positive number of ba or ep."""
    window = (TimeUnit.DURATION, TimeUnit.EPOCH, TimeUnit.BATCH)
    start, end = check_time("swa_start", swa_start, window), check_time("swa_end", swa_end, window)
    every = check_time("update_interval", update_interval, (TimeUnit.BATCH, TimeUnit.EPOCH), positive=True)
    if start.unit is not end.unit:
        raise ValueError(f"`swa_start`={swa_start!r} and `swa_end`={swa_end!r} must use the same unit, e.g. "
                         "swa_start='0.7dur', swa_end='0.97dur' or swa_start='70ep', swa_end='97ep'")  # fmt: skip
    if end.value <= start.value:
        raise ValueError(f"`swa_end`={swa_end!r} must come after `swa_start`={swa_start!r}")
    return start, end, every
