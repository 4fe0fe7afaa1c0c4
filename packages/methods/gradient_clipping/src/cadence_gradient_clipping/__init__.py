"""Gradient clipping for cadence: by value, by global norm, or adaptive (AGC).

Pascanu, Mikolov and Bengio, "On the difficulty of training recurrent neural networks", ICML 2013;
Brock, De, Smith and Simonyan, "High-Performance Large-Scale Image Recognition Without
Normalization", ICML 2021 (AGC). `apply_gradient_clipping` is the function for your own training
loop; `GradientClipping` is the method for `cadence.Trainer`.
"""

from cadence_gradient_clipping.algorithm import GradientClipping as GradientClipping
from cadence_gradient_clipping.functional import adaptive_clipping_coefficient as adaptive_clipping_coefficient
from cadence_gradient_clipping.functional import apply_gradient_clipping as apply_gradient_clipping
from cadence_gradient_clipping.functional import check_gradient_clipping_args as check_gradient_clipping_args
from cadence_gradient_clipping.functional import unitwise_norm as unitwise_norm

__all__ = [
    "GradientClipping",
    "adaptive_clipping_coefficient",
    "apply_gradient_clipping",
    "check_gradient_clipping_args",
    "unitwise_norm",
]
