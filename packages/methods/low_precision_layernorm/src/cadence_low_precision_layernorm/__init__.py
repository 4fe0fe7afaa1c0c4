"""Low Precision LayerNorm for cadence: LayerNorms that run in bf16/fp16 under autocast, not fp32.

`apply_low_precision_layernorm` is the surgery for your own training loop, `LPLayerNorm` the layer for
models built by hand, and `LowPrecisionLayerNorm` the method for `cadence.Trainer`.
"""

from cadence_low_precision_layernorm.algorithm import LowPrecisionLayerNorm
from cadence_low_precision_layernorm.functional import apply_low_precision_layernorm
from cadence_low_precision_layernorm.layers import LPLayerNorm, low_precision_layer_norm

__all__ = ["LPLayerNorm", "LowPrecisionLayerNorm", "apply_low_precision_layernorm", "low_precision_layer_norm"]
