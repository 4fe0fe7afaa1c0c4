"""Squeeze-and-Excitation (Hu et al., 2018) as model surgery: SE blocks after the wide convolutions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.ops.checks import check_int, check_number
from cadence.ops.surgery import Policy, SurgeryReport, policy_for, replace_modules
from cadence_squeeze_excite.layers import SqueezeExciteConv2d

__all__ = ["apply_squeeze_excite", "check_squeeze_excite_args"]


def check_squeeze_excite_args(latent_channels: float, min_channels: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed values."""
    check_number("latent_channels", latent_channels, gt=0, hint="a width >= 1 or a fraction in (0, 1) of C")
    if latent_channels >= 1 and latent_channels != int(latent_channels):
        raise ValueError(
            f"`latent_channels`={latent_channels!r} must be a whole width >= 1 or a fraction in (0, 1) of the "
            "channels; e.g. 64 or 0.25"
        )
    check_int("min_channels", min_channels, ge=0, hint="convs with min(in, out) channels below it get no SE block")


def apply_squeeze_excite(
    model: nn.Module,
    latent_channels: float = 64,
    min_channels: int = 128,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Add a Squeeze-and-Excitation block after every `torch.nn.Conv2d` with ``min(in, out) >= min_channels``.

    Each block rescales the convolution's output channels by gains computed from the whole image
    (global average, bottleneck MLP, sigmoid), which lets the network use global context. Per the
    paper it improves accuracy at a small cost in compute; per Composer it adds ~20% inference latency.
    The model is changed in place (see `cadence.ops.surgery.replace_modules`): each convolution is kept
    inside its `SqueezeExciteConv2d` with its parameters and optimizer state; the new SE weights join
    the convolution's parameter group; device, dtype and memory format follow the convolution; a
    second call changes nothing.

    Args:
        model: the model to change in place (a ``torch.compile``-d model through its original).
        latent_channels: the hidden width of each block's MLP; a value in (0, 1) is that fraction of the
            convolution's output channels.
        min_channels: only convolutions with at least this many input and output channels get a block
            (deeper layers: wider, with smaller feature maps, where a block costs least).
        optimizers: optimizers already built on ``model.parameters()``: their parameter groups and state
            are updated. Optimizers built after this call need nothing.
        strict: raise `cadence.ops.NoEffectError` instead of warning when nothing matched.

    Returns:
        The `SurgeryReport`: which convolutions got a block, by path.
    """
    check_squeeze_excite_args(latent_channels, min_channels)

    def add_block(conv: nn.Conv2d, path: str) -> SqueezeExciteConv2d | None:
        if min(conv.in_channels, conv.out_channels) >= min_channels:
            return SqueezeExciteConv2d.from_conv2d(conv, latent_channels=latent_channels)
        return None

    policies: dict[type[nn.Module], Policy] = {nn.Conv2d: policy_for(nn.Conv2d, add_block)}
    return replace_modules(model, policies, optimizers=optimizers, method="SqueezeExcite", strict=strict)
