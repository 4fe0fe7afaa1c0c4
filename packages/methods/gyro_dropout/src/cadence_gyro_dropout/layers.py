"""`GyroDropoutLayer`: dropout with masks from a small pool of sub-networks chosen once (Lee et al., MLSys 2022)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence.ops.checks import check_int, check_number

__all__ = ["GyroDropoutLayer", "check_gyro_dropout_args"]


def check_gyro_dropout_args(p: float, sigma: int, tau: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_number("p", p, ge=0, lt=1, hint="the probability of dropping a unit (1 would divide by 0)")
    check_int("sigma", sigma, ge=1, hint="the number of pre-selected masks (sub-networks), e.g. 256")
    check_int("tau", tau, ge=1, hint="the number of masks used in each step, e.g. 16")


class GyroDropoutLayer(nn.Module):
    """``y = x * mask / (1 - p)`` in training, ``y = x`` in evaluation, with masks from a fixed pool.

    Plain dropout trains a new random sub-network for every sample, each seen about once. Gyro
    dropout pre-selects `sigma` masks and trains only those, `tau` at a time, so each is trained
    often enough to be good, and the ensemble at evaluation averages fewer, better sub-networks.

    On its first training forward the layer draws the pool: `sigma` masks over the input's last
    dimension (the units), each unit kept with probability ``1 - p``. Every `period` training
    forwards it picks `tau` masks of the pool (with replacement, as Composer). In each forward the
    batch is split into `tau` blocks of consecutive rows and block k uses mask k: row i of B uses
    mask ``i * tau // B`` (blocks of B/tau rows when tau divides B, as Composer's
    ``repeat_interleave``; nearly equal blocks otherwise, where Composer's shapes do not match).
    A mask covers every position of a sample (``(B, ..., F)`` inputs broadcast it over the middle
    dimensions). ``period = int(iters_per_epoch * max_epoch / sigma) * tau`` (Composer's), at
    least 1: over the run each mask of the pool gets about the same share of the steps.

    The pool, the picked masks (buffers) and the step count (extra state) are in the state dict,
    so a run resumed from a checkpoint goes on with the same sub-networks. ``dropout_mask`` holds
    the ``(B, units)`` mask of the last training forward, in the input's dtype (Composer's attribute;
    not saved).

    Args:
        iters_per_epoch: training steps per epoch. max_epoch: epochs of the run (only
            ``iters_per_epoch * max_epoch``, the run's length in steps, matters).
        p: the probability of dropping a unit, in [0, 1).
        sigma: the size of the pool. tau: the masks used per step.
        generator: draws the pool and the picks, on the input's device (the global RNG when None).
    """

    preselect_masks: torch.Tensor  # buffers
    selected_masks: torch.Tensor

    def __init__(
        self,
        iters_per_epoch: int,
        max_epoch: float,
        p: float,
        sigma: int,
        tau: int,
        *,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        check_gyro_dropout_args(p, sigma, tau)
        self.iters_per_epoch = check_int("iters_per_epoch", iters_per_epoch, ge=1)
        self.max_epoch = check_number("max_epoch", max_epoch, gt=0)
        self.p, self.sigma, self.tau = float(p), sigma, tau
        self.period = max(int(self.iters_per_epoch * self.max_epoch / sigma) * tau, 1)
        self.generator = generator
        self.register_buffer("preselect_masks", torch.zeros(0, 0, dtype=torch.bool))  # (sigma, units) once drawn
        self.register_buffer("selected_masks", torch.zeros(0, dtype=torch.long))  # (tau,) indices into the pool
        self.training_step = 0
        self.dropout_mask = torch.empty(0, 0)  # Composer's attribute: the (B, units) mask of the last training forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        if self.preselect_masks.numel() == 0:
            draws = torch.rand(self.sigma, x.shape[-1], generator=self.generator, device=x.device)
            self.preselect_masks = draws > self.p  # Composer's comparison
        elif self.preselect_masks.shape[1] != x.shape[-1]:
            raise ValueError(
                f"GyroDropoutLayer drew its masks for {self.preselect_masks.shape[1]} units, got {x.shape}"
            )
        if self.training_step % self.period == 0:
            self.selected_masks = torch.randint(
                self.sigma, (self.tau,), generator=self.generator, device=self.preselect_masks.device
            )
        self.training_step += 1
        rows = torch.arange(x.shape[0], device=x.device) * self.tau // x.shape[0]
        self.dropout_mask = self.preselect_masks[self.selected_masks[rows]].to(x.dtype)  # (B, units)
        mask = self.dropout_mask.view(x.shape[0], *[1] * (x.ndim - 2), x.shape[-1])
        return x * mask * (1.0 / (1.0 - self.p))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        for name in ("preselect_masks", "selected_masks"):  # a fresh layer has not drawn yet: take the saved shape
            saved = state_dict.get(prefix + name)
            if isinstance(saved, torch.Tensor) and saved.shape != getattr(self, name).shape:
                setattr(self, name, torch.empty_like(saved, device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def get_extra_state(self) -> dict[str, int]:
        return {"training_step": self.training_step}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.training_step = int(state["training_step"])

    def extra_repr(self) -> str:
        return f"p={self.p:g}, sigma={self.sigma}, tau={self.tau}, period={self.period}"
