"""Ghost Batch Normalization (Hoffer et al., 2017) as model surgery: BatchNorm layers over ghost batches."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from cadence.ops.checks import check_int
from cadence.ops.surgery import Policy, SurgeryReport, policy_for, replace_modules
from cadence_ghost_batchnorm.layers import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d

__all__ = ["apply_ghost_batchnorm", "check_ghost_batchnorm_args"]

_GHOSTS = {nn.BatchNorm1d: GhostBatchNorm1d, nn.BatchNorm2d: GhostBatchNorm2d, nn.BatchNorm3d: GhostBatchNorm3d}


def check_ghost_batchnorm_args(ghost_batch_size: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed values."""
    check_int("ghost_batch_size", ghost_batch_size, ge=1, hint="samples per ghost batch, e.g. 32")


def apply_ghost_batchnorm(
    model: nn.Module,
    ghost_batch_size: int = 32,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace every `torch.nn.BatchNorm1d/2d/3d` of `model` by its ghost version (`GhostBatchNorm2d`, ...).

    In training, each layer normalises chunks of about `ghost_batch_size` samples with their own
    statistics: the noise of small-batch statistics regularises large-batch training (Hoffer et al.,
    2017). Dim 0 is the sample axis. A batch of at most `ghost_batch_size` samples is one chunk, plain
    BatchNorm (Composer raises there). The ghost layers hold the original parameters and buffers, so
    the optimizers and their state, device, dtype and the state-dict keys stay as they were; a second
    call changes nothing (see `cadence.ops.surgery.replace_modules`). Subclasses such as
    `torch.nn.SyncBatchNorm` are left alone.

    Args:
        model: the model to change in place (a ``torch.compile``-d model through its original).
        ghost_batch_size: samples per ghost batch (per device under data parallelism); the batch is
            split into ``ceil(B / ghost_batch_size)`` chunks.
        optimizers: optimizers already built on ``model.parameters()`` (nothing changes for them).
        strict: raise `cadence.ops.NoEffectError` instead of warning when the model has no BatchNorm.

    Returns:
        The `SurgeryReport`: which layers were replaced, by path.
    """
    check_ghost_batchnorm_args(ghost_batch_size)

    def ghost(module: _BatchNorm, path: str) -> nn.Module:
        return _GHOSTS[type(module)].from_batchnorm(module, ghost_batch_size)

    policies: dict[type[nn.Module], Policy] = {batchnorm: policy_for(batchnorm, ghost) for batchnorm in _GHOSTS}
    return replace_modules(model, policies, optimizers=optimizers, method="GhostBatchNorm", strict=strict)
