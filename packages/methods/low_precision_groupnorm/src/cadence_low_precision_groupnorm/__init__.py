"""Low-Precision GroupNorm: GroupNorm that runs in bf16/fp16 under autocast instead of fp32.

`apply_low_precision_groupnorm` is Composer's function for your own training loop;
`LowPrecisionGroupNorm` is the method for `cadence.Trainer`; `LPGroupNorm` is the layer, for
models built by hand.
"""

from cadence_low_precision_groupnorm.algorithm import LowPrecisionGroupNorm
from cadence_low_precision_groupnorm.functional import apply_low_precision_groupnorm
from cadence_low_precision_groupnorm.layers import (
    LPGroupNorm,
    autocast_dtype,
    cast_if_autocast_enabled,
    low_precision_group_norm,
)

__all__ = [
    "LPGroupNorm",
    "LowPrecisionGroupNorm",
    "apply_low_precision_groupnorm",
    "autocast_dtype",
    "cast_if_autocast_enabled",
    "low_precision_group_norm",
]
