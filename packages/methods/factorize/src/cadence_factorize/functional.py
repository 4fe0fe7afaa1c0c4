"""Factorize as functions on modules: wide Conv2d and Linear layers become two thinner ones. Torch only.

The layers and the low-rank math live in `cadence_factorize.layers`; this module decides which
layers to replace and does the surgery.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_int, check_number
from cadence.ops.surgery import Policy, SurgeryReport, no_effect, policy_for, replace_modules
from cadence_factorize.layers import FactorizedConv2d, FactorizedLinear, max_rank_with_speedup, resolve_latent_size

__all__ = ["apply_factorization", "check_factorize_args", "check_latent_size", "factorizing_could_speedup"]


def check_latent_size(name: str, value: float) -> float:
    """A latent size: a whole number of channels (>= 1) or a fraction in (0, 1) of ``min(in, out)``."""
    check_number(name, value, gt=0, hint="a number of latent channels (>= 1) or a fraction in (0, 1) of min(in, out)")
    if value >= 1 and value != int(value):
        raise ValueError(f"`{name}`={value!r} must be a whole number of channels (>= 1) or a fraction in (0, 1)")
    return value


def check_factorize_args(
    factorize_convs: bool,
    factorize_linears: bool,
    min_channels: int,
    latent_channels: float,
    min_features: int,
    latent_features: float,
) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_bool("factorize_convs", factorize_convs)
    check_bool("factorize_linears", factorize_linears)
    check_int("min_channels", min_channels, ge=0, hint="convolutions with fewer input or output channels are kept")
    check_latent_size("latent_channels", latent_channels)
    check_int("min_features", min_features, ge=0, hint="linear layers with fewer input or output features are kept")
    check_latent_size("latent_features", latent_features)


def factorizing_could_speedup(module: nn.Module, latent_size: float) -> bool:
    """Whether factorizing `module` with `latent_size` (channels, or a fraction of ``min(in, out)``) lowers
    its multiply-adds (Composer's function). Grouped convolutions, and layers of other types, never do;
    an already factorized layer does for any smaller latent size.
    """
    if isinstance(module, FactorizedConv2d):
        return resolve_latent_size(latent_size, module.in_channels, module.out_channels) < module.latent_size
    if isinstance(module, FactorizedLinear):
        return resolve_latent_size(latent_size, module.in_features, module.out_features) < module.latent_size
    if isinstance(module, nn.Conv2d) and module.groups == 1:
        sizes = module.in_channels, module.out_channels
        return resolve_latent_size(latent_size, *sizes) <= max_rank_with_speedup(*sizes, module.kernel_size)
    if isinstance(module, nn.Linear):
        sizes = module.in_features, module.out_features
        return resolve_latent_size(latent_size, *sizes) <= max_rank_with_speedup(*sizes)
    return False


def apply_factorization(
    model: nn.Module,
    factorize_convs: bool = True,
    factorize_linears: bool = True,
    min_channels: int = 512,
    latent_channels: float = 0.25,
    min_features: int = 512,
    latent_features: float = 0.25,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace wide `torch.nn.Conv2d` and `torch.nn.Linear` layers by `FactorizedConv2d`/`FactorizedLinear`
    where that lowers their multiply-adds (`factorizing_could_speedup`).

    Each replacement starts as the best rank-``latent`` approximation of the layer it replaces (the
    truncated SVD of its weight), so trained weights are approximated, not re-initialised. Returns the
    `SurgeryReport`; nothing replaced warns `NoEffectWarning` (``strict=True``: raises `NoEffectError`).

    Args:
        model: changed in place (a ``torch.compile``-d model through its original module). Only layers
            of exactly these types are replaced: subclasses (the output projection of
            ``nn.MultiheadAttention``) and grouped convolutions are kept.
        factorize_convs, factorize_linears: which kinds of layers to consider.
        min_channels: convolutions with fewer input or output channels are kept (small layers use the
            hardware poorly, so fewer multiply-adds seldom means less time).
        latent_channels: channels between the two convolutions: a number (>= 1), or a fraction in
            (0, 1) of ``min(in_channels, out_channels)`` (at least 1).
        min_features, latent_features: the same for linear layers.
        optimizers: optimizers already built over ``model.parameters()``: the replaced layers' parameters
            leave them and the new ones join the same parameter group.
    """
    check_factorize_args(
        factorize_convs, factorize_linears, min_channels, latent_channels, min_features, latent_features
    )

    def factorized_conv(conv: nn.Conv2d, path: str) -> nn.Module | None:
        wide = min(conv.in_channels, conv.out_channels) >= min_channels  # narrow layers use the hardware poorly
        if not (wide and factorizing_could_speedup(conv, latent_channels)):
            return None
        return FactorizedConv2d.from_conv2d(conv, latent_channels)

    def factorized_linear(linear: nn.Linear, path: str) -> nn.Module | None:
        wide = min(linear.in_features, linear.out_features) >= min_features
        if not (wide and factorizing_could_speedup(linear, latent_features)):
            return None
        return FactorizedLinear.from_linear(linear, latent_features)

    if not (factorize_convs or factorize_linears):  # Composer: a no-op; here also a warning that says so
        no_effect(
            "Factorize changed no module: factorize_convs=False and factorize_linears=False leave nothing to "
            "factorize; set one True",
            strict=strict,
            stacklevel=2,
        )
        return SurgeryReport("Factorize")
    policies: dict[type[nn.Module], Policy] = {}
    if factorize_convs:
        policies[nn.Conv2d] = policy_for(nn.Conv2d, factorized_conv)
    if factorize_linears:
        policies[nn.Linear] = policy_for(nn.Linear, factorized_linear)
    return replace_modules(model, policies, optimizers=optimizers, method="Factorize", strict=strict)
