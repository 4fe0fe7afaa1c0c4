"""Low-Precision GroupNorm as a function on modules: GroupNorm -> `LPGroupNorm`. Torch only."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.ops.checks import check_choice
from cadence.ops.surgery import SurgeryReport, no_effect, policy_for, replace_modules
from cadence_low_precision_groupnorm.layers import LPGroupNorm

__all__ = ["PRECISIONS", "apply_low_precision_groupnorm", "check_low_precision_groupnorm_args"]

PRECISIONS = ("fp32", "amp_fp16", "amp_bf16")
"""The trainer's precisions (``cadence.Precision`` values; Composer's names)."""


def check_low_precision_groupnorm_args(precision: str | None) -> str | None:
    """Reject a precision that is not one of `PRECISIONS` (None is allowed), naming the argument."""
    if precision is None:
        return None
    return check_choice("precision", precision, PRECISIONS, hint="None: replace, and follow autocast at run time")


def apply_low_precision_groupnorm(
    model: nn.Module,
    precision: str | None = None,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace every `torch.nn.GroupNorm` of `model` by an `LPGroupNorm` holding the same parameters.

    Under bf16 or fp16 autocast the norms then run in that dtype; without autocast they compute
    exactly what GroupNorm computes. Returns the `SurgeryReport`; nothing replaced warns
    `NoEffectWarning` (``strict=True``: raises `NoEffectError`).

    Args:
        model: changed in place (a ``torch.compile``-d model through its original module).
        precision: the training precision (a ``cadence.Precision`` or its value). ``'fp32'`` runs
            without autocast, where the replacement would change nothing: nothing is replaced and
            `NoEffectWarning` says so (Composer also does nothing for ``None``; here None replaces,
            and the layers follow whatever autocast is active when they run).
        optimizers: accepted for Composer's signature; the parameters stay the same objects, so
            optimizers keep them and their state either way.
    """
    precision = check_low_precision_groupnorm_args(precision)
    if precision == "fp32":
        message = (
            "LowPrecisionGroupNorm changed no module: precision='fp32' runs without autocast, where LPGroupNorm "
            "computes exactly what GroupNorm does; train with precision='amp_bf16' or 'amp_fp16'"
        )
        no_effect(message, strict=strict, stacklevel=2)
        return SurgeryReport("LowPrecisionGroupNorm")
    return replace_modules(
        model,
        {nn.GroupNorm: policy_for(nn.GroupNorm, lambda layer, path: LPGroupNorm.from_groupnorm(layer))},
        optimizers=optimizers,
        method="LowPrecisionGroupNorm",
        strict=strict,
    )
