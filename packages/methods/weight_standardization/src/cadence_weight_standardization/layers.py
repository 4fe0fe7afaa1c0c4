"""`WeightStandardizer`: the parametrization that standardizes a convolution's weight (Qiao et al., 2019).

Register it by hand on any convolution (this is what `apply_weight_standardization` does)::

    torch.nn.utils.parametrize.register_parametrization(conv, "weight", WeightStandardizer())

``conv.weight`` then returns the standardized weight, computed from the trained parameter (now
``conv.parametrizations.weight.original``, the same Parameter object) on every access.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["EPS", "WeightStandardizer", "standardize_weight"]

EPS = 1e-10
"""Added to the variance before the square root (Composer's value): keeps an all-equal filter finite."""


def standardize_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` with zero mean and unit variance per output channel (over input channels and kernel).

    ``(W - mean) / sqrt(var + EPS)`` with the biased variance, as in the paper and Composer. A
    standardized filter cannot grow or drift in scale, which smooths the loss landscape the way
    BatchNorm does for activations, and makes training less dependent on the batch size.
    """
    dims = tuple(range(1, weight.ndim))
    var, mean = torch.var_mean(weight, dim=dims, keepdim=True, correction=0)
    return (weight - mean) / torch.sqrt(var + EPS)


class WeightStandardizer(nn.Module):
    """A ``torch.nn.utils.parametrize`` parametrization: ``weight -> standardize_weight(weight)``.

    It has no parameters and no right inverse, so registering it keeps the original Parameter
    object (optimizers that hold it keep training it, with their state).
    """

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return standardize_weight(weight)
