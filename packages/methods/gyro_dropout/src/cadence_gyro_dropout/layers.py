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
    steps it picks `tau` masks of the pool (with replacement, as Composer), drawn on the step's
    first training forward. The step's batch is split into `tau` blocks of consecutive rows and
    block k uses mask k: row i of B uses mask ``i * tau // B`` (blocks of B/tau rows when tau
    divides B, as Composer's ``repeat_interleave``; nearly equal blocks otherwise, where Composer's
    shapes do not match). A mask covers every position of a sample (``(B, ..., F)`` inputs
    broadcast it over the middle dimensions). ``period = int(iters_per_epoch * max_epoch / sigma)
    * tau`` (Composer's), at least 1: over the run each mask of the pool gets about the same share
    of the steps.

    **What a step is.** A step is an optimizer step (the paper's iteration: one mini-batch, split
    among the `tau` sub-networks). Used alone, as in Composer, the layer cannot see optimizer
    steps and counts every training forward as one: right for a loop with one forward per
    optimizer step, too fast with gradient accumulation or SAM (two forwards per step). A loop
    that runs several forwards per step calls `start_step` once per optimizer step, before its
    forwards: from the first call on, forwards no longer count steps, and every forward until the
    next call (each microbatch, SAM's second pass) uses the step's masks. With ``batch_size``, set
    `microbatch_offset` to the first row of each microbatch within the step's batch to give every
    sample the mask it would get in the unsplit batch. `GyroDropout` does both under the Trainer.

    The pool, the picked masks (buffers) and the step count (extra state) are in the state dict,
    so a run resumed from a checkpoint goes on with the same sub-networks. ``dropout_mask`` holds
    the ``(B, units)`` mask of the last training forward, in the input's dtype (Composer's attribute;
    not saved). ``training_step`` is the number of steps begun (Composer's attribute): after N
    optimizer steps it is N.

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
        self.training_step = 0  # steps begun (extra state)
        self.step_batch_size: int | None = None  # samples of the current step's batch (start_step), None: unknown
        self.microbatch_offset = 0  # the first row of the next forward's input within the step's batch
        self.dropout_mask = torch.empty(0, 0)  # Composer's attribute: the (B, units) mask of the last training forward
        self._pick_due = False  # a step began on a period boundary: its first forward draws the picks (extra state)
        self._counts_forwards = True  # until start_step is called, every training forward is a step

    def start_step(self, batch_size: int | None = None) -> None:
        """Begin the next training step (an optimizer step): call it once per step, before its forwards.

        From the first call on, the layer stops counting forwards as steps: every training forward
        until the next call (each microbatch of a gradient-accumulation step, SAM's second pass)
        uses this step's masks, and new ones are picked every `period` calls, on the step's first
        forward. `GyroDropout` calls it on every BATCH_START.

        Args:
            batch_size: the samples of the whole step's batch; the next forward's rows start at
                `microbatch_offset` (reset to 0 here) within it, so that row ``offset + i`` gets
                mask ``(offset + i) * tau // batch_size``, as in the unsplit batch. None: every
                forward splits its own input into `tau` blocks. A forward whose rows do not fit
                (``microbatch_offset + rows > batch_size``) does so too.
        """
        if batch_size is not None:
            check_int("batch_size", batch_size, ge=1, hint="the samples of the whole step's batch")
        self._counts_forwards = False
        self._advance()
        self.step_batch_size, self.microbatch_offset = batch_size, 0

    def _advance(self) -> None:
        if self.training_step % self.period == 0:
            self._pick_due = True
        self.training_step += 1

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
        if self._counts_forwards:  # used alone (Composer's behaviour): a training forward is a step
            self._advance()
        if self._pick_due:  # after the pool, as Composer draws them
            self.selected_masks = torch.randint(
                self.sigma, (self.tau,), generator=self.generator, device=self.preselect_masks.device
            )
            self._pick_due = False
        count, total, offset = x.shape[0], self.step_batch_size, self.microbatch_offset
        if total is None or offset + count > total:  # the input is a batch of its own
            total, offset = count, 0
        rows = (torch.arange(count, device=x.device) + offset) * self.tau // total
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
        return {"training_step": self.training_step, "pick_due": int(self._pick_due)}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.training_step = int(state["training_step"])
        self._pick_due = bool(state.get("pick_due", 0))  # absent from checkpoints of before start_step

    def extra_repr(self) -> str:
        return f"p={self.p:g}, sigma={self.sigma}, tau={self.tau}, period={self.period}"
