"""Decoupled weight decay (Loshchilov and Hutter, ICLR 2019, https://arxiv.org/abs/1711.05101).

The optimizers and the decay function live in the core (`cadence.ops.weight_decay`), because the
`Trainer`'s default optimizer is `DecoupledSGDW(lr=0.1)`, as in Composer; they are importable from
`cadence.optim` too (Composer's ``composer.optim``). This module is the method's functional API.
"""

from cadence.ops.weight_decay import (
    DecoupledAdamW,
    DecoupledSGDW,
    apply_decoupled_weight_decay,
    check_decoupled_weight_decay_args,
)

__all__ = ["DecoupledAdamW", "DecoupledSGDW", "apply_decoupled_weight_decay", "check_decoupled_weight_decay_args"]
