"""`LabelSmoothing`: the Event adapter around `smooth_labels`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, Method, check_batch_key, logits_of, require_tensor
from cadence_label_smoothing.functional import check_smoothing, smooth_labels

__all__ = ["LabelSmoothing"]


class LabelSmoothing(Method):
    """Smooths the targets the loss sees (see `smooth_labels`), and only those.

    Events: BEFORE_LOSS replaces the targets by smoothed ones; AFTER_LOSS puts the very same original
    target object back, so metrics, callbacks and later methods see the data as loaded. Both fire per
    microbatch. The logits are the model's outputs, or their ``logits`` (HuggingFace models).
    """

    events = (Event.BEFORE_LOSS, Event.AFTER_LOSS)
    order = 10  # outside MixUp (20) and CutMix (30): see the card's Composition section

    def __init__(self, smoothing: float = 0.1, target_key: BatchKey = 1):
        self.smoothing = check_smoothing(smoothing)
        self.target_key = check_batch_key("target_key", target_key)
        self._original_target: Any = None

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.BEFORE_LOSS:
            self._original_target = state.batch_get_item(self.target_key)
            smoothed = smooth_labels(logits_of(state.outputs), self._original_target, self.smoothing)
            state.batch_set_item(self.target_key, smoothed)
        else:
            state.batch_set_item(self.target_key, self._original_target)
            self._original_target = None

    def effects(self) -> Effects:
        return Effects(reads={Resource.TARGETS}, writes={Resource.TARGETS})

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.target_key, "class targets", key_name="target_key")
