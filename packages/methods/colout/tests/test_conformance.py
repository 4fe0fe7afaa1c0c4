"""ColOut meets the contract every cadence method meets, in batch and in sample mode."""

from __future__ import annotations

import torch
from cadence_colout import ColOut, colout_batch

from cadence.testing import MethodConformance


class TestColOutConformance(MethodConformance):
    functional_preserves_shape = False

    def make_algorithm(self) -> ColOut:
        return ColOut()

    def functional_calls(self):
        return {
            "colout_batch": lambda x, y: colout_batch(x, generator=torch.Generator().manual_seed(0)),
            "colout_batch(batch=False)": lambda x, y: colout_batch(x, batch=False),
        }


class TestColOutSampleModeConformance(TestColOutConformance):
    def make_algorithm(self) -> ColOut:
        return ColOut(p_row=0.25, p_col=0.25, batch=False)
