"""Factorize: replace wide Conv2d and Linear layers by two thinner ones when that lowers the multiply-adds.

`apply_factorization` is Composer's function for your own training loop; `Factorize` is the
method for `cadence.Trainer`; `FactorizedConv2d` and `FactorizedLinear` are the layers, for
models built by hand; `factorize_matrix` and `factorize_conv2d` fit a low-rank map on data.
"""

from cadence_factorize.algorithm import Factorize
from cadence_factorize.functional import apply_factorization, factorizing_could_speedup
from cadence_factorize.layers import (
    FactorizedConv2d,
    FactorizedLinear,
    LowRankSolution,
    factorize_conv2d,
    factorize_matrix,
    max_rank_with_speedup,
)

__all__ = [
    "Factorize",
    "FactorizedConv2d",
    "FactorizedLinear",
    "LowRankSolution",
    "apply_factorization",
    "factorize_conv2d",
    "factorize_matrix",
    "factorizing_could_speedup",
    "max_rank_with_speedup",
]
