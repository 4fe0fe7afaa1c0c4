"""Weight Standardization (Qiao et al., 2019): convolution weights with zero mean and unit variance.

`apply_weight_standardization` is Composer's function for your own training loop;
`WeightStandardization` is the method for `cadence.Trainer`; `WeightStandardizer` is the
parametrization, for models built by hand.
"""

from cadence_weight_standardization.algorithm import WeightStandardization
from cadence_weight_standardization.functional import (
    apply_weight_standardization,
    convolutions_in_execution_order,
    is_standardized,
    standardize_conv_weights,
)
from cadence_weight_standardization.layers import WeightStandardizer, standardize_weight

__all__ = [
    "WeightStandardization",
    "WeightStandardizer",
    "apply_weight_standardization",
    "convolutions_in_execution_order",
    "is_standardized",
    "standardize_conv_weights",
    "standardize_weight",
]
