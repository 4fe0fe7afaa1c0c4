"""Sharpness-Aware Minimization (Foret, Kleiner, Mobahi and Neyshabur, ICLR 2021,
https://arxiv.org/abs/2010.01412) as an optimizer that wraps another. Torch only."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from cadence.ops.checks import ArgumentTypeError, check_int, check_number

__all__ = ["SAMOptimizer", "check_sam_args"]


def check_sam_args(rho: float, epsilon: float, interval: int) -> tuple[float, float, int]:
    """The arguments as (float, float, int), or a ValueError/TypeError naming the bad one."""
    rho = check_number("rho", rho, ge=0, hint="the radius of the neighbourhood: 0.05 (0.5 with interval=10)")
    epsilon = check_number("epsilon", epsilon, gt=0, hint="keeps rho / (||g|| + epsilon) finite; 1e-12")
    interval = check_int("interval", interval, ge=1, hint="1 makes every step a SAM step, 10 every tenth")
    return rho, epsilon, interval


class SAMOptimizer(torch.optim.Optimizer):
    """Makes every `interval`-th step of `base_optimizer` sharpness-aware.

    Such a step evaluates the gradient ``g`` at the weights ``w`` (``closure(sync=False)``: under
    DDP each rank keeps its own gradient, as in Composer and Foret et al.'s m-sharpness), moves to
    ``w + e`` with ``e = rho * g / (||g|| + epsilon)`` (``||g||`` over every parameter), zeroes
    the gradients and evaluates them there (``closure()``), puts back exactly ``w`` and lets the
    base optimizer step with that second gradient. The other steps are one ``closure()`` and a
    base step. `step` returns the first evaluation's loss: the loss at ``w``, logged once. Given
    the `model`, the second evaluation leaves no trace but its gradient: its buffers (BatchNorm
    statistics, which would otherwise count every step twice, once at perturbed weights) are
    put back as the first evaluation left them.

    `param_groups` and `state` are the base optimizer's own objects, so LR schedulers built on
    either act on the same groups; `state_dict` is the base's plus SAM's step counter (resume
    through this wrapper). The closure runs forward and backward over the whole batch and returns
    the loss; it may take a ``sync`` keyword (False: skip the DDP gradient all-reduce). It need not
    zero the gradients: SAM does between its two evaluations.

    Args:
        base_optimizer: takes the steps (SGD, AdamW, DecoupledSGDW, ...).
        rho: the radius of the neighbourhood, >= 0 (0 is the base optimizer, twice as slow).
        epsilon: added to ``||g||``, > 0.
        interval: SAM runs on steps ``interval, 2 * interval, ...``; >= 1.
        model: the model the closure runs, whose buffers the second evaluation must not change.
        grad_scaler: fp16 only: the GradScaler the closure's backward scales with. The closure
            must unscale (``grad_scaler.unscale_(sam_optimizer)``); SAM then skips the perturbation
            and the step when the gradients are not finite and calls ``grad_scaler.update()``
            after each evaluation, as ``GradScaler.step`` and ``update`` would (one host sync per
            evaluation, as ``GradScaler.step`` has).
    """

    uses_closure = True  # cadence's trainer steps it with a closure over the batch

    def __init__(
        self,
        base_optimizer: torch.optim.Optimizer,
        rho: float = 0.05,
        epsilon: float = 1e-12,
        interval: int = 1,
        *,
        model: torch.nn.Module | None = None,
        grad_scaler: torch.amp.GradScaler | None = None,
    ):
        self.rho, self.epsilon, self.interval = check_sam_args(rho, epsilon, interval)
        if not isinstance(base_optimizer, torch.optim.Optimizer) or isinstance(base_optimizer, SAMOptimizer):
            raise ArgumentTypeError(
                f"`base_optimizer`={base_optimizer!r} must be a torch optimizer that is not a SAMOptimizer"
            )
        self.base_optimizer, self.model = base_optimizer, model
        self.grad_scaler = grad_scaler if grad_scaler is not None and grad_scaler.is_enabled() else None
        self.global_step = 0
        super().__init__([{"params": group["params"]} for group in base_optimizer.param_groups], {})
        self._share_base()

    def _share_base(self) -> None:
        self.param_groups, self.state, self.defaults = (
            self.base_optimizer.param_groups,
            self.base_optimizer.state,
            self.base_optimizer.defaults,
        )

    @torch.no_grad()
    def step(self, closure: Callable[..., Any] | None = None) -> Any:  # type: ignore[override]
        if closure is None:
            raise ValueError("SAMOptimizer.step needs a closure that runs forward and backward on the batch")
        self.global_step += 1
        if self.global_step % self.interval:
            loss = _evaluate(closure, sync=True)
            if self._finite_and_rescaled(sync=True):
                self.base_optimizer.step()
            return loss
        loss = _evaluate(closure, sync=False)
        if not self._finite_and_rescaled(sync=False):
            return loss
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        weights = [p.detach().clone() for p in params]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_add_(params, torch._foreach_mul(grads, self.rho / (norm + self.epsilon)))
        buffers = list(self.model.buffers()) if self.model is not None else []
        saved_buffers = [buffer.clone() for buffer in buffers]
        self.base_optimizer.zero_grad(set_to_none=True)
        _evaluate(closure, sync=True)
        finite = self._finite_and_rescaled(sync=True)
        torch._foreach_copy_(params, weights)  # exactly w again, whatever the closure did at w + e
        for buffer, saved in zip(buffers, saved_buffers):
            buffer.copy_(saved)
        if finite:
            self.base_optimizer.step()
        return loss

    def _finite_and_rescaled(self, sync: bool) -> bool:
        """Without a grad scaler: True (no host sync). With one: whether every rank's gradients are
        finite, then ``update()``, so that the next evaluation can unscale again."""
        if self.grad_scaler is None:
            return True
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        finite = torch.stack(torch._foreach_norm(grads, float("inf"))).isfinite().all().float() if grads else None
        if finite is not None and not sync and dist.is_available() and dist.is_initialized():
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)  # local gradients: every rank must skip together
        self.grad_scaler.update()
        return finite is None or bool(finite)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base_optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {**self.base_optimizer.state_dict(), "sam": {"global_step": self.global_step}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The base optimizer's state and SAM's counter (a base optimizer's own state dict loads too)."""
        state_dict = dict(state_dict)
        sam = state_dict.pop("sam", {"global_step": 0})
        self.base_optimizer.load_state_dict(state_dict)
        self.global_step = int(sam["global_step"])
        self._share_base()

    def __repr__(self) -> str:
        return (
            f"SAMOptimizer(rho={self.rho}, epsilon={self.epsilon}, interval={self.interval}, {self.base_optimizer!r})"
        )


def _evaluate(closure: Callable[..., Any], sync: bool) -> Any:
    with torch.enable_grad():
        if "sync" in inspect.signature(closure).parameters:
            return closure(sync=sync)
        return closure()
