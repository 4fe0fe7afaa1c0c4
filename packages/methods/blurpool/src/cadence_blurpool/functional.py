"""BlurPool (Zhang, 2019) as model surgery: anti-alias the strided convolutions and max-pools of a model."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_int
from cadence.ops.surgery import Policy, SurgeryReport, policy_for, replace_modules
from cadence_blurpool.layers import BlurConv2d, BlurMaxPool2d

__all__ = ["apply_blurpool", "check_blurpool_args"]


def check_blurpool_args(replace_convs: bool, replace_maxpools: bool, blur_first: bool, min_channels: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed values."""
    check_bool("replace_convs", replace_convs)
    check_bool("replace_maxpools", replace_maxpools)
    check_bool("blur_first", blur_first, "False blurs after a stride-1 convolution: the paper's order, ~4x its cost")
    check_int("min_channels", min_channels, ge=0, hint="strided convs with fewer input channels stay (16 skips stems)")
    if not (replace_convs or replace_maxpools):
        raise ValueError(
            "`replace_convs`=False and `replace_maxpools`=False: BlurPool would change nothing; set one of them to True"
        )


def apply_blurpool(
    model: nn.Module,
    replace_convs: bool = True,
    replace_maxpools: bool = True,
    blur_first: bool = True,
    min_channels: int = 16,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Add anti-aliasing filters to the strided `torch.nn.Conv2d` and the `torch.nn.MaxPool2d` modules of `model`.

    A strided layer subsamples without low-pass filtering, so its output changes a lot when the input
    shifts by a pixel; blurring before the subsampling makes the network more shift-invariant and, per
    the paper, more accurate. The model is changed in place (see `cadence.ops.surgery.replace_modules`:
    weights, device, dtype, memory format and optimizer state are kept; a second call changes nothing).

    Args:
        model: the model to change in place (a ``torch.compile``-d model is changed through its original).
        replace_convs: wrap every Conv2d with a stride above 1 and at least `min_channels` input channels
            in a `BlurConv2d` (the convolution itself, with its parameters, stays inside).
        replace_maxpools: replace every MaxPool2d with a stride above 1 by a `BlurMaxPool2d` (pools that
            return indices stay: the blurred result has none).
        blur_first: blur the convolution's input (about the cost of the blur alone). False: run the
            convolution at stride 1, then blur and subsample its output (the paper's order; ~stride² times
            the convolution's cost, and per Composer about +0.1% more accuracy).
        min_channels: convolutions with fewer input channels stay as they are (16 keeps RGB stems sharp).
        optimizers: optimizers already built on ``model.parameters()``: their parameter groups and state
            are updated. Optimizers built after this call need nothing.
        strict: raise `cadence.ops.NoEffectError` instead of warning when nothing matched.

    Returns:
        The `SurgeryReport`: which modules were replaced, by path.
    """
    check_blurpool_args(replace_convs, replace_maxpools, blur_first, min_channels)

    def blur_conv(conv: nn.Conv2d, path: str) -> BlurConv2d | None:
        if max(conv.stride) > 1 and conv.in_channels >= min_channels:
            return BlurConv2d.from_conv2d(conv, blur_first=blur_first)
        return None

    def blur_maxpool(pool: nn.MaxPool2d, path: str) -> BlurMaxPool2d | None:
        subsamples = max(pool.stride if isinstance(pool.stride, tuple) else (pool.stride,)) > 1
        return BlurMaxPool2d.from_maxpool2d(pool) if subsamples and not pool.return_indices else None

    policies: dict[type[nn.Module], Policy] = {nn.Conv2d: policy_for(nn.Conv2d, blur_conv)} if replace_convs else {}
    if replace_maxpools:
        policies[nn.MaxPool2d] = policy_for(nn.MaxPool2d, blur_maxpool)
    return replace_modules(model, policies, optimizers=optimizers, method="BlurPool", strict=strict)
