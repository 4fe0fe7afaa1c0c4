"""`DecoupledWeightDecay`: decoupled weight decay for any optimizer, as a method."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import Method
from cadence_decoupled_weight_decay.functional import apply_decoupled_weight_decay, check_decoupled_weight_decay_args

__all__ = ["DecoupledWeightDecay"]


class DecoupledWeightDecay(Method):
    """Decays the weights right before every optimizer step by ``1 - weight_decay * lr / initial_lr``
    of their param group (see `apply_decoupled_weight_decay`): any optimizer with
    ``weight_decay=0`` then decays as `DecoupledSGDW` and `DecoupledAdamW` do.

    INIT records each group's ``initial_lr`` (before the schedulers start) and refuses optimizers
    that decay already; AFTER_TRAIN_BATCH decays, only when the gradients are finite (the steps a
    GradScaler skips get no decay). Under SAM it fires once per gradient evaluation; SAM restores
    the weights of its first evaluation, so each step still decays once.
    """

    events = (Event.INIT, Event.AFTER_TRAIN_BATCH)
    order = 50  # AFTER_* events run in reverse: after GradientClipping (60), whose AGC reads the undecayed weights

    def __init__(self, weight_decay: float = 5e-4):
        self.weight_decay = check_decoupled_weight_decay_args(weight_decay)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        for index, optimizer in enumerate(state.optimizers):
            if event is Event.AFTER_TRAIN_BATCH:
                apply_decoupled_weight_decay(optimizer.param_groups, self.weight_decay, only_if_finite=True)
                continue
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
                if group.get("weight_decay", 0.0):
                    raise ValueError(
                        f"optimizer {index} ({type(optimizer).__name__}) already decays its weights "
                        f"(weight_decay={group['weight_decay']!r}); {self!r} would decay them twice. Build it with "
                        "weight_decay=0, or drop DecoupledWeightDecay and keep the optimizer's decay"
                    )

    def effects(self) -> Effects:
        return Effects(reads={Resource.OPTIMIZER, Resource.GRADIENTS}, writes={Resource.WEIGHTS})
