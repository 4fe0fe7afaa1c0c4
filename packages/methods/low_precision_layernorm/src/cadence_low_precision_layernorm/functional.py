"""Low Precision LayerNorm as model surgery: every `torch.nn.LayerNorm` becomes an `LPLayerNorm`. Torch only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_choice
from cadence.ops.surgery import SurgeryReport, no_effect, policy_for, replace_modules, unwrap_model
from cadence_low_precision_layernorm.layers import LPLayerNorm

__all__ = ["apply_low_precision_layernorm", "check_low_precision_layernorm_args"]

PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
# LayerNorm subclasses that compute `nn.LayerNorm`'s function on the same parameters, by module and class name (their
# libraries are not imported here). Others are left alone: a subclass may compute something else (timm's
# LayerNorm2d normalises an NCHW tensor over its channels, which an LPLayerNorm would not).
SAME_FUNCTION = {("timm.layers.norm", "LayerNorm")}  # timm's ViT, Swin, ... (F.layer_norm, or its fast_norm option)


def check_low_precision_layernorm_args(precision: Any, strict: bool = False) -> str | None:
    """`precision` as a plain string (or None), refusing values that name no precision."""
    check_bool("strict", strict, "True: changing no module is an error, not a warning")
    if precision is None:
        return None
    value = getattr(precision, "value", precision)  # cadence.Precision is a str enum
    return check_choice("precision", value, PRECISIONS, "None replaces regardless of the precision")


def apply_low_precision_layernorm(
    model: nn.Module,
    precision: Any = None,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace every `torch.nn.LayerNorm` of `model` (that type exactly, or a subclass in `SAME_FUNCTION`, such as
    timm's ``LayerNorm``) by an `LPLayerNorm`, in place.

    Under bf16 or fp16 autocast the replaced norms run in that dtype instead of fp32, which
    saves their casts and memory traffic; outside autocast they compute what they computed.
    Each `LPLayerNorm` holds the original's weight and bias tensors, so weights, device, dtype
    and the optimizers' parameters and state stay as they are. Applying it twice changes nothing.

    Args:
        model: the model to change (a ``torch.compile``-d model is changed through its original).
        precision: the run's precision (``"fp32"``, ``"amp_bf16"``, ``"amp_fp16"`` or a
            `cadence.Precision`). ``"fp32"`` changes nothing and warns, as in Composer: without
            autocast an `LPLayerNorm` is a plain LayerNorm. None (the default here; Composer's
            None means fp32) replaces whatever the precision, for models run under autocast by
            hand.
        optimizers: optimizers training `model`; they keep their parameters and state (the
            LayerNorms' tensors are shared, not copied).
        strict: raise `NoEffectError` instead of warning `NoEffectWarning` when nothing changes.

    Returns:
        The `SurgeryReport`: which modules were replaced.
    """
    precision = check_low_precision_layernorm_args(precision, strict)
    if precision == "fp32":
        message = (
            "apply_low_precision_layernorm changed nothing: precision='fp32' runs without autocast, where a "
            "LayerNorm already computes in fp32; use precision='amp_bf16' or 'amp_fp16'"
        )
        no_effect(message, strict=strict, stacklevel=2)
        return SurgeryReport("LowPrecisionLayerNorm")
    policy = policy_for(nn.LayerNorm, lambda module, path: LPLayerNorm.from_layernorm(module))
    policies = {kind: policy for kind in _layernorm_types(model)}
    return replace_modules(model, policies, optimizers=optimizers, method="LowPrecisionLayerNorm", strict=strict)


def _layernorm_types(model: nn.Module) -> list[type[nn.Module]]:
    """`nn.LayerNorm` and the subclasses of it in `SAME_FUNCTION` that `model` holds."""
    found = {
        type(module)
        for module in unwrap_model(model).modules()
        if isinstance(module, nn.LayerNorm) and (type(module).__module__, type(module).__qualname__) in SAME_FUNCTION
    }
    return [nn.LayerNorm, *sorted(found, key=lambda kind: kind.__qualname__)]
