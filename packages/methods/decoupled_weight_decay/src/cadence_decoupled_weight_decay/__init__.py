"""Decoupled weight decay for cadence: the decay per step follows the learning-rate schedule, not
the learning rate.

Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019. `DecoupledSGDW` and
`DecoupledAdamW` are drop-in torch optimizers (Composer's); `apply_decoupled_weight_decay` is the
function for your own loop; `DecoupledWeightDecay` is the method that gives any optimizer the
same decay in `cadence.Trainer`.
"""

from cadence_decoupled_weight_decay.algorithm import DecoupledWeightDecay as DecoupledWeightDecay
from cadence_decoupled_weight_decay.functional import DecoupledAdamW as DecoupledAdamW
from cadence_decoupled_weight_decay.functional import DecoupledSGDW as DecoupledSGDW
from cadence_decoupled_weight_decay.functional import apply_decoupled_weight_decay as apply_decoupled_weight_decay
from cadence_decoupled_weight_decay.functional import (
    check_decoupled_weight_decay_args as check_decoupled_weight_decay_args,
)

__all__ = [
    "DecoupledAdamW",
    "DecoupledSGDW",
    "DecoupledWeightDecay",
    "apply_decoupled_weight_decay",
    "check_decoupled_weight_decay_args",
]
