"""Ghost Batch Normalization for cadence: BatchNorm statistics over small ghost batches (Hoffer et al., NeurIPS 2017).

`apply_ghost_batchnorm` changes a model for your own training loop; `GhostBatchNorm` is the method
for `cadence.Trainer`; `GhostBatchNorm1d/2d/3d` are drop-in BatchNorm layers for models built by hand.
"""

from cadence_ghost_batchnorm.algorithm import GhostBatchNorm
from cadence_ghost_batchnorm.functional import apply_ghost_batchnorm
from cadence_ghost_batchnorm.layers import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d

__all__ = ["GhostBatchNorm", "GhostBatchNorm1d", "GhostBatchNorm2d", "GhostBatchNorm3d", "apply_ghost_batchnorm"]
