"""GhostBatchNorm meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_ghost_batchnorm import GhostBatchNorm

from cadence.testing import MethodConformance


class TestGhostBatchNormConformance(MethodConformance):
    supported_batch_sizes = (2, 3)  # one sample cannot be split into ghost batches: check_applicable refuses it

    def make_algorithm(self) -> GhostBatchNorm:
        return GhostBatchNorm(ghost_batch_size=1)  # the suite's batches hold 2 to 4 images
