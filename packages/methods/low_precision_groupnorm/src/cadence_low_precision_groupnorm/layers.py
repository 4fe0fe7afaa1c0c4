"""`LPGroupNorm`: a GroupNorm that runs in the autocast dtype (bf16 or fp16) rather than in fp32.

CUDA's autocast runs ``group_norm`` in fp32: a bf16 activation is upcast, normalised and
written back at twice the width. `LPGroupNorm` casts its input, weight and bias to the
autocast dtype and runs the norm there with autocast off, which halves that memory traffic.
Without autocast it is exactly `torch.nn.GroupNorm`.

The two autocast helpers (`autocast_dtype`, `cast_if_autocast_enabled`) are what
LowPrecisionLayerNorm shares with this method: candidates for ``cadence.ops`` once both exist.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LPGroupNorm", "autocast_dtype", "cast_if_autocast_enabled", "low_precision_group_norm"]


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on `device_type` ("cpu", "cuda", ...), or None when it is off there."""
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def cast_if_autocast_enabled(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """`tensor` in the autocast dtype of its device while autocast is on there; otherwise (or None) unchanged.

    Composer's ``_cast_if_autocast_enabled`` asks ``torch.is_autocast_enabled()``, which reads
    CUDA's autocast only; this asks the tensor's own device, so CPU autocast counts too.
    """
    if tensor is None:
        return None
    dtype = autocast_dtype(tensor.device.type)
    return tensor if dtype is None else tensor.to(dtype)


@torch.fx.wrap  # one call in an fx graph: the autocast state is read when the graph runs, not when it is traced
def low_precision_group_norm(
    input: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.group_norm`` in the autocast dtype while autocast is on for `input`'s device; plain otherwise."""
    device_type = input.device.type
    dtype = autocast_dtype(device_type)
    if dtype is None:
        return F.group_norm(input, num_groups, weight, bias, eps)
    input, weight, bias = input.to(dtype), cast_if_autocast_enabled(weight), cast_if_autocast_enabled(bias)
    with torch.autocast(device_type, enabled=False):  # no upcast to fp32 of the low-precision tensors
        return F.group_norm(input, num_groups, weight, bias, eps)


class LPGroupNorm(nn.GroupNorm):
    """`torch.nn.GroupNorm` that runs in the autocast dtype under autocast (see the module docstring).

    Same arguments, parameters and state-dict keys as `torch.nn.GroupNorm`; affine or not.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return low_precision_group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    @classmethod
    def from_groupnorm(cls, layer: nn.GroupNorm) -> LPGroupNorm:
        """An `LPGroupNorm` that holds `layer`'s own weight and bias (the same Parameter objects, or None):
        optimizers keep training them, with their state."""
        new = cls(layer.num_groups, layer.num_channels, layer.eps, affine=False)
        new.affine = layer.affine
        new.weight, new.bias = layer.weight, layer.bias
        return new.train(layer.training)
