"""`LPLayerNorm`: a `torch.nn.LayerNorm` that runs in the autocast dtype (bf16 or fp16) instead of fp32.

Autocast runs ``layer_norm`` in fp32 on CUDA (and in the input's dtype on the CPU), so a
transformer trained in bf16 or fp16 spends its LayerNorms in fp32 and casts around them.
`LPLayerNorm` casts the input, weight and bias to the autocast dtype and normalises there,
as a fused low-precision LayerNorm would. Outside autocast it is `torch.nn.LayerNorm`, exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LPLayerNorm", "low_precision_layer_norm"]


def _cast(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(dtype)


@torch.fx.wrap  # symbolic_trace keeps this call as one node, so a traced model still decides under autocast
def low_precision_layer_norm(
    input: torch.Tensor,
    normalized_shape: tuple[int, ...],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.layer_norm`` in the autocast dtype of `input`'s device when autocast is on there.

    Under ``torch.autocast(device, dtype)`` the input, weight and bias are cast to ``dtype``
    and the norm runs with autocast off, so it is neither promoted to fp32 nor cast back;
    the result has ``dtype``. Without autocast (and for float64 inputs, which autocast never
    lowers) this is ``F.layer_norm`` itself, bit for bit.
    """
    device_type = input.device.type
    if not torch.is_autocast_enabled(device_type) or input.dtype == torch.float64:
        return F.layer_norm(input, normalized_shape, weight, bias, eps)
    dtype = torch.get_autocast_dtype(device_type)
    with torch.autocast(device_type, enabled=False):
        return F.layer_norm(input.to(dtype), normalized_shape, _cast(weight, dtype), _cast(bias, dtype), eps)


class LPLayerNorm(nn.LayerNorm):
    """A LayerNorm that normalises in the autocast dtype (see `low_precision_layer_norm`).

    Built like `torch.nn.LayerNorm` (same arguments, same parameters, same state dict), so a
    model can use it directly or take it through `apply_low_precision_layernorm`.
    """

    @classmethod
    def from_layernorm(cls, layer: nn.LayerNorm) -> LPLayerNorm:
        """An `LPLayerNorm` holding `layer`'s own weight and bias (the same tensors, or None).

        Sharing the parameters keeps their values, device, dtype and optimizer state as they are.
        """
        has_bias = layer.bias is not None
        new = cls(layer.normalized_shape, layer.eps, layer.elementwise_affine, bias=has_bias, device="meta")
        new.weight, new.bias = layer.weight, layer.bias  # replaces the meta placeholders
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return low_precision_layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
