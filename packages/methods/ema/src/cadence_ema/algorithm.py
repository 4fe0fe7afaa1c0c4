"""`EMA`: the Event adapter over `compute_ema` and `swap_weights`, and the checks of its time arguments."""

from __future__ import annotations

from typing import Any

import torch

from cadence import Effects, Event, Resource, State, Time, TimeUnit
from cadence.ops import Method, check_choice, check_number, check_time
from cadence_ema.functional import compute_ema, ema_weights, smoothing_from_half_life, swap_weights

__all__ = ["EMA", "check_ema_args"]

_BA_EP = (TimeUnit.BATCH, TimeUnit.EPOCH)


class EMA(Method):
    """Averages the weights with `compute_ema` on BATCH_END or EPOCH_END (the unit of `update_interval`), every
    `update_interval` from `ema_start` on. Evaluation (``eval_with='ema'``), checkpoints and the model after
    `fit` hold the average; training always steps the training weights.

    The average is swapped in (`swap_weights`) on EVAL_START and back on EVAL_END. When a checkpoint is due,
    it is swapped in before the write (the checkpoint's model is the average; the training weights are in
    this method's state) and back on the next BEFORE_DATALOADER, BATCH_START or update. At FIT_END it is
    swapped in for good. Arguments as in Composer's EMA (see `check_ema_args`); ``eval_with='raw'``
    evaluates the training weights instead.
    """

    events = (
        *(Event.AFTER_LOAD, Event.BEFORE_DATALOADER, Event.BATCH_START, Event.BATCH_END, Event.EPOCH_END),
        *(Event.BATCH_CHECKPOINT, Event.EPOCH_CHECKPOINT, Event.FIT_END, Event.EVAL_START, Event.EVAL_END),
    )
    order = 200  # last on BATCH_END, EPOCH_END and the checkpoint events: it averages (and swaps in) the
    # weights every other method has finished changing

    def __init__(
        self,
        half_life: str | Time | None = "1000ba",
        smoothing: float | None = None,
        ema_start: str | float | Time = "0.0dur",
        update_interval: str | Time | None = None,
        *,
        eval_with: str = "ema",
    ):
        self._smoothing, self._start, self._every = check_ema_args(half_life, smoothing, ema_start, update_interval)
        self.half_life, self.smoothing, self.ema_start = half_life, smoothing, ema_start
        self.update_interval = update_interval
        self.eval_with = check_choice("eval_with", eval_with, ("ema", "raw"), "'raw' evaluates the training weights")
        self._update_event = Event.BATCH_END if self._every.unit is TimeUnit.BATCH else Event.EPOCH_END
        self._held: dict[str, torch.Tensor] = {}  # the weights the model does not hold now; empty before ema_start
        self.ema_active = False  # whether the model holds the average (then `_held` holds the training weights)
        self.num_updates = 0
        self._active_before_eval = False

    def match(self, event: Event, state: State) -> bool:
        if event is self._update_event:
            return bool(self._held) or self._started(state)
        if event in (Event.BEFORE_DATALOADER, Event.BATCH_START):
            return self.ema_active
        if event in (Event.BATCH_CHECKPOINT, Event.EPOCH_CHECKPOINT):
            return state.checkpoint_due and bool(self._held)
        return event in (Event.AFTER_LOAD, Event.FIT_END, Event.EVAL_START, Event.EVAL_END) and bool(self._held)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.AFTER_LOAD:  # checkpoints load on the CPU
            self._held = {name: held.to(state.device) for name, held in self._held.items()}
        elif event is Event.EVAL_START:
            self._active_before_eval = self.ema_active
            self._hold_average(state, self.eval_with == "ema")
        elif event is Event.EVAL_END:
            self._hold_average(state, self._active_before_eval)
        elif event in (Event.BATCH_CHECKPOINT, Event.EPOCH_CHECKPOINT, Event.FIT_END):
            self._hold_average(state, True)
        else:  # BEFORE_DATALOADER, BATCH_START or the update event: training continues on the training weights
            self._hold_average(state, False)
            if event is self._update_event:
                self._held = self._held or ema_weights(state.model)  # the average starts at the current weights
                if state.timestamp.get(self._every.unit) % self._every.value == 0:
                    compute_ema(state.model, self._held, self._smoothing)
                    self.num_updates += 1

    def _started(self, state: State) -> bool:
        if self._start.unit is TimeUnit.DURATION:
            elapsed = state.get_elapsed_duration()
            return elapsed is not None and elapsed.value >= self._start.value
        return state.timestamp.get(self._start.unit) >= self._start.value

    def _hold_average(self, state: State, average: bool) -> None:
        if self.ema_active != average:
            swap_weights(state.model, self._held)
            self.ema_active = average

    def state_dict(self) -> dict[str, Any]:
        return {"held": self._held, "ema_active": self.ema_active, "num_updates": self.num_updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._held, self.ema_active, self.num_updates = dict(state["held"]), state["ema_active"], state["num_updates"]

    def effects(self) -> Effects:
        fix = "use one of them (EMA averages all along from ema_start, SWA samples a window late in training)"
        starts_by_fraction = self._start.unit is TimeUnit.DURATION and self._start.value > 0
        reads = {Resource.WEIGHTS, Resource.DURATION} if starts_by_fraction else {Resource.WEIGHTS}
        return Effects(reads=reads, writes={Resource.WEIGHTS}, conflicts={"SWA": fix})


def check_ema_args(half_life: Any, smoothing: Any, ema_start: Any, update_interval: Any) -> tuple[float, Time, Time]:
    """EMA's arguments as (smoothing per update, ema_start, update_interval); each refusal names the argument.

    Exactly one of `half_life` (ba or ep) and `smoothing` (in (0, 1)); `update_interval` (ba or ep) defaults
    to 1 in the unit of `half_life` (``'1ba'`` with `smoothing`) and must use that unit; `ema_start` is in dur,
    ba or ep. Only dur may be fractional: ``'1.5ep'`` is refused, never truncated.
    """
    if (half_life is None) == (smoothing is None):
        given = "both" if smoothing is not None else "neither"
        raise ValueError(
            f"EMA takes exactly one of `half_life` and `smoothing`, got {given} (half_life={half_life!r}, "
            f"smoothing={smoothing!r}): e.g. EMA(half_life='1000ba') or EMA(half_life=None, smoothing=0.999)"
        )
    start = check_time("ema_start", ema_start, (TimeUnit.DURATION, *_BA_EP))
    life = None if half_life is None else check_time("half_life", half_life, _BA_EP, positive=True)
    default = Time(1, life.unit if life else TimeUnit.BATCH)
    every = check_time(
        "update_interval", default if update_interval is None else update_interval, _BA_EP, positive=True
    )
    if life is None:
        return check_number("smoothing", smoothing, gt=0, lt=1, hint="e.g. 0.999"), start, every
    if every.unit is not life.unit:
        raise ValueError(
            f"`half_life`={half_life!r} and `update_interval`={update_interval!r} must use the same unit: write "
            f"update_interval in {life.unit.value} (e.g. '1{life.unit.value}') or half_life in {every.unit.value}"
        )
    return smoothing_from_half_life(life.value, every.value), start, every
