"""`LabelSmoothing`: the Event adapter around `smooth_labels`."""

from __future__ import annotations

from typing import Any

from cadence.algorithm import Algorithm, Effects, Resource
from cadence.batch import BatchKey, check_batch_key
from cadence.event import Event
from cadence.state import State
from cadence_label_smoothing.functional import _check_smoothing, smooth_labels

__all__ = ["LabelSmoothing"]


class LabelSmoothing(Algorithm):
    """Smooths the targets the loss sees (see `smooth_labels`), and only those.

    Events: BEFORE_LOSS replaces the targets by smoothed ones; AFTER_LOSS puts the very same original
    target object back, so metrics, callbacks and later methods see the data as loaded. Both fire per
    microbatch.
    """

    events = (Event.BEFORE_LOSS, Event.AFTER_LOSS)
    order = 10  # outside MixUp (20) and CutMix (30): see the card's Composition section

    def __init__(self, smoothing: float = 0.1, target_key: BatchKey = 1):
        _check_smoothing(smoothing)
        self.smoothing = float(smoothing)
        self.target_key = check_batch_key("target_key", target_key)
        self._original_target: Any = None

    def effects(self) -> Effects:
        return Effects(reads={Resource.TARGETS}, writes={Resource.TARGETS})

    def match(self, event: Event, state: State) -> bool:
        return event in self.events

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.BEFORE_LOSS:
            self._original_target = state.batch_get_item(self.target_key)
            state.batch_set_item(self.target_key, smooth_labels(state.outputs, self._original_target, self.smoothing))
        else:
            state.batch_set_item(self.target_key, self._original_target)
            self._original_target = None
