"""SWA for cadence: Stochastic Weight Averaging (Izmailov et al., 2018) with BatchNorm statistics recomputed.

`SWA` is the method for `cadence.Trainer`. For your own loop: `swa_weights` (the first sample),
`average_weights`, `swa_learning_rate` (``SWALR`` in closed form), `load_weights` and
`recompute_bn_statistics` with `training_batches` (``update_bn`` for any batch format and microbatches).
"""

from cadence_swa.algorithm import SWA, check_swa_times
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

__all__ = [
    "SWA",
    "average_weights",
    "check_swa_args",
    "check_swa_times",
    "load_weights",
    "recompute_bn_statistics",
    "swa_learning_rate",
    "swa_weights",
    "training_batches",
    "use_learning_rates",
]
