"""Ghost Batch Normalization layers (Hoffer et al., 2017): BatchNorm over small "ghost" batches.

Large batches average the noise out of BatchNorm's statistics, and with it some of its regularising
effect. A ghost BatchNorm splits each training batch into ``ceil(B / ghost_batch_size)`` chunks
(``input.chunk``, as Composer) and normalises each with its own mean and variance, as if it had seen
small batches. The running statistics are updated once per chunk with the momentum divided by the
number of chunks, so they move as much per step as one BatchNorm update would. In eval mode (running
statistics) it is plain BatchNorm.

`GhostBatchNorm1d/2d/3d` subclass `torch.nn.BatchNorm1d/2d/3d`: the same parameters and buffers under
the same names (a state dict loads into either), and ``isinstance(m, nn.BatchNorm2d)`` still holds for
code that treats normalisation layers apart (weight-decay groups, conv-BN fusion). They compile with
``torch.jit.script`` and export with ``torch.export.export``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from cadence.ops.checks import check_int

__all__ = ["GhostBatchNorm1d", "GhostBatchNorm2d", "GhostBatchNorm3d"]


def _ghost_batch_norm(
    input: torch.Tensor,
    ghost_batch_size: int,
    ndims: list[int],
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    counter: torch.Tensor | None,
    batch_statistics: bool,
    momentum: float | None,
    eps: float,
) -> torch.Tensor:
    """`torch.nn.functional.batch_norm` per ghost batch (one chunk when using the running statistics)."""
    if input.dim() not in ndims:
        raise ValueError(f"expected {' or '.join([f'{n}D' for n in ndims])} input (got {input.dim()}D input)")
    chunks = math.ceil(input.shape[0] / ghost_batch_size) if batch_statistics else 1
    outputs: list[torch.Tensor] = []
    for chunk in input.chunk(chunks):
        factor = 0.0 if momentum is None else momentum / chunks
        if counter is not None:
            counter.add_(1)  # once per chunk, as Composer's BatchNorm call per chunk does
            if momentum is None:
                factor = 1.0 / float(counter)  # a cumulative average over chunks (torch's momentum=None)
        outputs.append(F.batch_norm(chunk, running_mean, running_var, weight, bias, batch_statistics, factor, eps))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)


torch.fx.wrap("_ghost_batch_norm")  # a leaf for torch.fx.symbolic_trace: the chunk count depends on the batch size


class _GhostBatchNorm(_BatchNorm):
    """What the three ghost classes add to their `torch.nn.BatchNorm*d` base."""

    _ndims: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        ghost_batch_size: int = 32,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        self.ghost_batch_size = check_int("ghost_batch_size", ghost_batch_size, ge=1, hint="samples per ghost batch")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.input_ndims = list(self._ndims)  # an instance attribute, which TorchScript compiles

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ghost_batch_size={self.ghost_batch_size}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        running = not self.training or self.track_running_stats  # the same rules as torch's BatchNorm.forward
        return _ghost_batch_norm(
            input,
            self.ghost_batch_size,
            self.input_ndims,
            self.running_mean if running else None,
            self.running_var if running else None,
            self.weight,
            self.bias,
            self.num_batches_tracked if self.training and self.track_running_stats else None,
            self.training or (self.running_mean is None and self.running_var is None),
            self.momentum,
            self.eps,
        )

    @classmethod
    def from_batchnorm(cls, module: _BatchNorm, ghost_batch_size: int = 32) -> nn.Module:
        """The ghost version of `module`, holding `module`'s own parameters and buffers (nothing is copied)."""
        args = (module.num_features, ghost_batch_size, module.eps, module.momentum, module.affine)
        ghost = cls(*args, module.track_running_stats, device="meta")  # placeholders, replaced below
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            setattr(ghost, name, tensor)
        return ghost.train(module.training)


class GhostBatchNorm1d(_GhostBatchNorm, nn.BatchNorm1d):
    """`torch.nn.BatchNorm1d` over ghost batches of `ghost_batch_size` samples; its other arguments as BatchNorm's."""

    _ndims = (2, 3)


class GhostBatchNorm2d(_GhostBatchNorm, nn.BatchNorm2d):
    """`torch.nn.BatchNorm2d` over ghost batches of `ghost_batch_size` samples; its other arguments as BatchNorm's."""

    _ndims = (4,)


class GhostBatchNorm3d(_GhostBatchNorm, nn.BatchNorm3d):
    """`torch.nn.BatchNorm3d` over ghost batches of `ghost_batch_size` samples; its other arguments as BatchNorm's."""

    _ndims = (5,)
