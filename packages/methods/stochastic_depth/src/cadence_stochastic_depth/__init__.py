"""Stochastic Depth (Huang et al., 2016): drop the residual branches of deep networks at random in training.

`apply_stochastic_depth` wraps residual blocks (torchvision, timm or your own) in `StochasticBlock`s;
`StochasticDepth` does it for `cadence.Trainer`, with a warm-up and checkpointed randomness.
"""

from cadence_stochastic_depth.algorithm import StochasticDepth
from cadence_stochastic_depth.functional import apply_stochastic_depth, layer_drop_rates, set_drop_rates
from cadence_stochastic_depth.layers import StochasticBlock, residual_parts

__all__ = [
    "StochasticBlock",
    "StochasticDepth",
    "apply_stochastic_depth",
    "layer_drop_rates",
    "residual_parts",
    "set_drop_rates",
]
