"""`GradientClipping`: the Event adapter around `apply_gradient_clipping`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import Method
from cadence_gradient_clipping.functional import apply_gradient_clipping, check_gradient_clipping_args

__all__ = ["GradientClipping"]


class GradientClipping(Method):
    """Clips the gradients on AFTER_TRAIN_BATCH (see `apply_gradient_clipping`).

    There the gradients are complete (every microbatch added), all-reduced under DDP and unscaled
    under fp16 loss scaling, and the optimizer has not stepped yet. With a closure optimizer (SAM)
    the event fires once per gradient evaluation, so both of SAM's gradients are clipped.
    """

    events = (Event.AFTER_TRAIN_BATCH,)
    order = 60  # AFTER_* events run in reverse: before DecoupledWeightDecay (50), AGC reads the undecayed weights

    def __init__(self, clipping_type: str = "norm", clipping_threshold: float = 1.0):
        self.clipping_type, self.clipping_threshold = check_gradient_clipping_args(clipping_type, clipping_threshold)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        apply_gradient_clipping(state.model, self.clipping_type, self.clipping_threshold)

    def effects(self) -> Effects:
        reads = {Resource.GRADIENTS, Resource.WEIGHTS} if self.clipping_type == "adaptive" else {Resource.GRADIENTS}
        return Effects(reads=reads, writes={Resource.GRADIENTS})
