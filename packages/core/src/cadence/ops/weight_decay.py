"""Decoupled weight decay (Loshchilov and Hutter, ICLR 2019, https://arxiv.org/abs/1711.05101)
whose strength follows the learning-rate schedule but not the learning rate. Torch only.

Every step multiplies each weight by ``1 - weight_decay * lr / initial_lr``: exactly
`weight_decay` at the initial learning rate, then following the schedule's shape. torch's SGD
adds ``weight_decay * w`` to the gradient (it passes through momentum and scales with ``lr``);
torch's AdamW multiplies by ``1 - lr * weight_decay`` (it scales with ``lr``). In both, changing
the learning rate changes the regularisation; here it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from cadence.ops.checks import check_number

__all__ = ["DecoupledAdamW", "DecoupledSGDW", "apply_decoupled_weight_decay", "check_decoupled_weight_decay_args"]


def check_decoupled_weight_decay_args(weight_decay: float) -> float:
    """`weight_decay` as a float in [0, 1), or a ValueError/TypeError naming it."""
    return check_number(
        "weight_decay",
        weight_decay,
        ge=0,
        lt=1,
        hint="the fraction of every weight removed per step at the initial learning rate, e.g. 5e-4 with SGD, "
        "1e-5 with Adam; it is not multiplied by lr, so torch's values (AdamW's 1e-2) are far too large",
    )


@torch.no_grad()
def apply_decoupled_weight_decay(
    param_groups: Iterable[dict[str, Any]], weight_decay: float | None = None, *, only_if_finite: bool = False
) -> None:
    """Multiply every parameter that has a gradient by ``1 - weight_decay * lr / initial_lr``.

    Call it right before ``optimizer.step()``, with the learning rate of that step in the groups.

    Args:
        param_groups: an optimizer's ``param_groups``. A group without ``initial_lr`` gets its
            current ``lr`` as such (as torch's LR schedulers do); ``initial_lr == 0`` decays by
            `weight_decay` (Composer's rule).
        weight_decay: the decay per step at the initial learning rate; None uses each group's own
            ``weight_decay``.
        only_if_finite: decay only when every gradient of the groups is finite, decided on the
            device (no host synchronisation): the steps that a GradScaler or a trainer skipping
            NaN losses does not take get no decay either.
    """
    if weight_decay is not None:
        check_decoupled_weight_decay_args(weight_decay)
    groups = list(param_groups)
    finite = _all_finite(groups) if only_if_finite else None
    for group in groups:
        decay = group.get("weight_decay", 0.0) if weight_decay is None else weight_decay
        params = [p for p in group["params"] if p.grad is not None]
        if not decay or not params:
            continue
        initial_lr = group.setdefault("initial_lr", group["lr"])
        keep = 1 - ((group["lr"] / initial_lr) if initial_lr else 1.0) * decay
        factor: float | torch.Tensor = keep
        if finite is not None:  # a device tensor, filled without a host round trip
            factor = torch.where(finite, torch.full((), keep, dtype=torch.float64, device=finite.device), 1.0)
        torch._foreach_mul_(params, factor)


def _all_finite(groups: Sequence[dict[str, Any]]) -> torch.Tensor | None:
    grads = [p.grad for group in groups for p in group["params"] if p.grad is not None]
    if not grads:
        return None
    return torch.stack(torch._foreach_norm(grads, float("inf"))).isfinite().all()


def _decoupled_step(optimizer: torch.optim.Optimizer, step: Callable[[], Any], closure: Any) -> Any:
    """Decay, then the parent's step with its own (coupled) weight decay switched off."""
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    apply_decoupled_weight_decay(optimizer.param_groups)
    decays = [group["weight_decay"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    try:
        step()
    finally:
        for group, decay in zip(optimizer.param_groups, decays):
            group["weight_decay"] = decay
    return loss


def _prepare_groups(optimizer: torch.optim.Optimizer) -> None:
    """Check every param group's own ``weight_decay`` and record its ``initial_lr`` (the decay's reference)."""
    for group in optimizer.param_groups:
        check_decoupled_weight_decay_args(group["weight_decay"])
        group.setdefault("initial_lr", group["lr"])


class DecoupledSGDW(torch.optim.SGD):
    """SGD with decoupled weight decay: each step multiplies the weights by
    ``1 - weight_decay * lr / initial_lr``, then takes ``torch.optim.SGD``'s step with no L2 term.

    Composer's ``DecoupledSGDW`` (same arguments); the decay never enters the momentum buffer.
    ``weight_decay`` may differ per param group (``{"params": biases, "weight_decay": 0}``).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        check_number("lr", lr, ge=0)
        super().__init__(params, lr, momentum, dampening, check_decoupled_weight_decay_args(weight_decay), nesterov)
        _prepare_groups(self)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return _decoupled_step(self, super().step, closure)


class DecoupledAdamW(torch.optim.AdamW):
    """Adam with decoupled weight decay: each step multiplies the weights by
    ``1 - weight_decay * lr / initial_lr``, then takes Adam's step (torch's kernels) with no decay.

    Composer's ``DecoupledAdamW``: its arguments and defaults (``betas=(0.9, 0.95)``,
    ``weight_decay=1e-5``, much smaller than AdamW's 1e-2 because it is not multiplied by lr).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 1e-5,
        amsgrad: bool = False,
    ):
        check_number("lr", lr, ge=0)
        super().__init__(params, lr, betas, eps, check_decoupled_weight_decay_args(weight_decay), amsgrad)
        _prepare_groups(self)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return _decoupled_step(self, super().step, closure)
