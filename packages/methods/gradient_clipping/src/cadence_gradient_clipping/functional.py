"""Gradient clipping by value, by global norm, or adaptively (AGC, Brock et al. 2021,
https://arxiv.org/abs/2102.06171), in place on the gradients of a model. Torch only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_choice, check_number

__all__ = [
    "AGC_EPS",
    "CLIPPING_TYPES",
    "adaptive_clipping_coefficient",
    "apply_gradient_clipping",
    "check_gradient_clipping_args",
    "unitwise_norm",
]

CLIPPING_TYPES = ("adaptive", "norm", "value")
AGC_EPS = 1e-3
"""AGC's floor on a unit's weight norm (Brock et al.): zero-initialised units still get gradients."""


def check_gradient_clipping_args(clipping_type: str, clipping_threshold: float) -> tuple[str, float]:
    """The arguments as (type, float threshold), or a ValueError/TypeError naming the bad one."""
    clipping_type = check_choice("clipping_type", clipping_type, CLIPPING_TYPES)
    hints = {
        "norm": "the largest global gradient norm, e.g. 1.0 (transformers) or 2.0 (Inception)",
        "value": "the largest absolute gradient element",
        "adaptive": "the largest gradient-to-weight norm ratio per unit, e.g. 0.01 (Brock et al., batch >= 1024)",
    }
    threshold = check_number("clipping_threshold", clipping_threshold, gt=0, hint=hints[clipping_type])
    return clipping_type, threshold


def apply_gradient_clipping(
    model: nn.Module | Iterable[torch.Tensor], clipping_type: str, clipping_threshold: float, fsdp_enabled: bool = False
) -> None:
    """Clip the gradients of `model` in place: call it after ``backward`` and before ``optimizer.step``.

    Large gradient steps destabilise training (exploding gradients, loss spikes at high learning
    rates or large batches); clipping bounds them. Parameters without a gradient are skipped.

    Args:
        model: a module, or an iterable of its parameters (``model.parameters()``).
        clipping_type: ``'norm'`` multiplies every gradient by ``min(1, t / ||G||)`` with ``||G||``
            the L2 norm of all gradients together (``torch.nn.utils.clip_grad_norm_``); ``'value'``
            clamps every element into ``[-t, t]`` (``clip_grad_value_``); ``'adaptive'`` clips each
            unit (a row of a Linear, a filter of a conv, a whole bias) whose gradient norm exceeds
            ``t`` times its weight norm (AGC, see `adaptive_clipping_coefficient`).
        clipping_threshold: ``t`` above, a finite number > 0.
        fsdp_enabled: Composer's flag for a model sharded with FSDP. Under FSDP2 (``fully_shard``, the
            trainer's ``parallelism_config``) parameters and gradients are DTensors, and the same code
            computes the global quantities over every rank's shards: the norm of all gradients, and
            AGC's per-unit norms (a unit lies on one rank: FSDP2 shards along dimension 0). So the flag
            changes nothing and either value is right; it is accepted for Composer's signature.
    """
    clipping_type, threshold = check_gradient_clipping_args(clipping_type, clipping_threshold)
    check_bool("fsdp_enabled", fsdp_enabled)
    parameters = model.parameters() if isinstance(model, nn.Module) else model
    with_grads = [p for p in parameters if p.grad is not None]
    if not with_grads:
        return
    if clipping_type == "norm":
        nn.utils.clip_grad_norm_(with_grads, max_norm=threshold)
    elif clipping_type == "value":
        nn.utils.clip_grad_value_(with_grads, clip_value=threshold)
    else:
        with torch.no_grad():
            for param in with_grads:
                grad = cast(torch.Tensor, param.grad).detach()  # with_grads holds the parameters that have one
                grad.mul_(adaptive_clipping_coefficient(param.detach(), grad, threshold))


def unitwise_norm(tensor: torch.Tensor) -> torch.Tensor:
    """The L2 norm of each output unit, shaped to broadcast against `tensor`.

    Scalars and vectors (biases, norm gains) are one unit; otherwise a unit is everything but
    dimension 0: a Linear's row ``(out, in)``, a conv's filter ``(out, in, kh, kw)``.
    """
    if tensor.ndim <= 1:
        return torch.linalg.vector_norm(tensor, ord=2)
    return torch.linalg.vector_norm(tensor, ord=2, dim=tuple(range(1, tensor.ndim)), keepdim=True)


def adaptive_clipping_coefficient(
    weights: torch.Tensor, grad: torch.Tensor, clipping_threshold: float = 0.01, eps: float = AGC_EPS
) -> torch.Tensor:
    """AGC's factor per unit: ``min(1, t * max(||W||, eps) / ||G||)``, 1 where it is NaN.

    A gradient whose norm exceeds ``t`` times its weights' norm is scaled down to exactly that;
    smaller ones are kept. Composer's formula without `eps` (``eps=0``) never lets a unit whose
    weights are all zero move; Brock et al.'s floor of 1e-3 does. A zero gradient keeps factor 1.
    """
    max_norm = unitwise_norm(weights).clamp(min=eps).mul_(clipping_threshold)
    return max_norm.div_(unitwise_norm(grad)).nan_to_num_(nan=1.0).clamp_(max=1.0)
