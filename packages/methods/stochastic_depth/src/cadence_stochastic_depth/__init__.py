"""Stochastic Depth (Huang et al., 2016): drop the residual branches of deep networks at random in training.

`apply_stochastic_depth` turns torchvision's ResNet blocks into `StochasticBasicBlock`/`StochasticBottleneck`
(Composer's layout: the state-dict keys do not change) and wraps other residual blocks (timm's, your own) in
`StochasticBlock`s; `StochasticDepth` does it for `cadence.Trainer`, with a warm-up and checkpointed randomness.
"""

from cadence_stochastic_depth.algorithm import StochasticDepth
from cadence_stochastic_depth.functional import apply_stochastic_depth, layer_drop_rates, set_drop_rates
from cadence_stochastic_depth.layers import (
    StochasticBlock,
    StochasticResNetBlock,
    is_stochastic,
    residual_parts,
    stochastic_resnet_block,
)

__all__ = [
    "StochasticBlock",
    "StochasticDepth",
    "StochasticResNetBlock",
    "apply_stochastic_depth",
    "is_stochastic",
    "layer_drop_rates",
    "residual_parts",
    "set_drop_rates",
    "stochastic_resnet_block",
]


def __getattr__(name: str) -> type:
    """`StochasticBasicBlock` and `StochasticBottleneck` (built on first use; see `cadence_stochastic_depth.layers`)."""
    from cadence_stochastic_depth import layers

    return layers.__getattr__(name)
