"""`GhostBatchNorm`: the Event adapter over `apply_ghost_batchnorm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cadence import NotApplicableError
from cadence.ops import SurgeryMethod, SurgeryReport, count_module_instances
from cadence_ghost_batchnorm.functional import apply_ghost_batchnorm, check_ghost_batchnorm_args
from cadence_ghost_batchnorm.layers import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d

__all__ = ["GhostBatchNorm"]


class GhostBatchNorm(SurgeryMethod):
    """Turns the model's BatchNorm layers into ghost BatchNorm once, on INIT (see `apply_ghost_batchnorm`)."""

    # INIT runs low orders first. It replaces BatchNorm layers only, which no other surgery replaces: its place
    # among the convolution surgeries (10-20) and ChannelsLast (90) does not matter; 30 keeps them apart.
    order = 30

    def __init__(self, ghost_batch_size: int = 32, *, strict: bool = False):
        check_ghost_batchnorm_args(ghost_batch_size)
        super().__init__(strict=strict)
        self.ghost_batch_size = ghost_batch_size

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_ghost_batchnorm(model, self.ghost_batch_size, optimizers, strict=self.strict)

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        ghosts = (GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d)
        return [{"GhostBatchNorm/num_new_modules": count_module_instances(model, ghosts)}]

    def check_applicable(self, model: Any, batch: Any) -> None:
        items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else [batch]
        sizes = [item.shape[0] for item in items if isinstance(item, torch.Tensor) and item.ndim > 0]
        if not sizes or sizes[0] > self.ghost_batch_size:
            return
        fix = (
            f"pass ghost_batch_size below {sizes[0]} (e.g. {max(1, sizes[0] // 4)})"
            if sizes[0] > 1
            else "use larger batches"
        )
        raise NotApplicableError(
            f"{self!r} would change nothing: batches of {sizes[0]} samples are one ghost batch, normalised as plain "
            f"BatchNorm does; {fix}, or leave GhostBatchNorm out"
        )
