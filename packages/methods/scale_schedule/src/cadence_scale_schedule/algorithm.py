"""`ScaleSchedule`: ``Trainer(scale_schedule_ratio=...)`` as a method a recipe can list."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import Method
from cadence_scale_schedule.functional import check_scale_schedule_args, scale_duration

__all__ = ["ScaleSchedule"]


class ScaleSchedule(Method):
    """On INIT, scales ``state.max_duration`` by `ratio` (see `scale_duration`) and multiplies
    ``state.scale_schedule_ratio`` by it.

    The trainer compiles its schedulers right after INIT with ``state.scale_schedule_ratio``
    (cadence schedulers take it, torch schedulers are scaled in place by `scale_scheduler`), so
    the whole learning-rate curve is compressed into the scaled run, and the ratio multiplies
    the trainer's own ``scale_schedule_ratio``. Stateless: a resumed run scales again on INIT,
    before the checkpoint loads.
    """

    events = (Event.INIT,)
    order = -100  # first on INIT: methods that read max_duration there see the scaled run

    def __init__(self, ratio: float = 1.0):
        self.ratio = check_scale_schedule_args(ratio)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if state.max_duration is not None:
            state.max_duration = scale_duration(state.max_duration, self.ratio, state.dataloader_len)
        state.scale_schedule_ratio *= self.ratio

    def effects(self) -> Effects:
        return Effects(reads={Resource.SCHEDULE, Resource.DURATION}, writes={Resource.SCHEDULE, Resource.DURATION})
