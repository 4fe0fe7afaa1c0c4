"""`SAM`: wraps the run's optimizer in a `SAMOptimizer`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import Method
from cadence_sam.functional import SAMOptimizer, check_sam_args

__all__ = ["SAM"]


class SAM(Method):
    """On INIT, replaces the optimizer by a `SAMOptimizer` around it (arguments as there); the
    trainer then steps it with a closure that runs forward and backward over the whole batch.

    INIT rather than Composer's AFTER_LOAD: a SAM run's checkpoint holds a SAMOptimizer's state
    (the base optimizer's and SAM's step counter), so the wrapper must exist before it loads.
    The schedulers, compiled right after INIT, act on the base optimizer's param groups, which the
    wrapper shares. Under fp16 the wrapper handles the run's grad scaler (``state.scaler``); the
    model's buffers (BatchNorm statistics) keep what the first evaluation of a step did to them.
    """

    events = (Event.INIT,)
    order = 110  # after the surgery methods on INIT (<= 90): it wraps the optimizer they have edited

    def __init__(self, rho: float = 0.05, epsilon: float = 1e-12, interval: int = 1):
        self.rho, self.epsilon, self.interval = check_sam_args(rho, epsilon, interval)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if not state.optimizers:
            return
        if len(state.optimizers) > 1 or isinstance(state.optimizers[0], SAMOptimizer):
            raise ValueError(
                f"{self!r} wraps one optimizer and this run has {state.optimizers!r}; pass a single optimizer "
                "(param groups for different settings), not already wrapped in a SAMOptimizer"
            )
        base = state.optimizers[0]
        sam = SAMOptimizer(base, self.rho, self.epsilon, self.interval, model=state.model, grad_scaler=state.scaler)
        state.optimizers = [sam]

    def effects(self) -> Effects:
        return Effects(
            reads={Resource.GRADIENTS},
            writes={Resource.WEIGHTS},
            exclusive={Resource.OPTIMIZER: "steps the optimizer through a two-pass SAMOptimizer"},
        )
