"""CutOut meets the contract every cadence method meets."""

from __future__ import annotations

import torch
from cadence_cutout import CutOut, cutout_batch

from cadence.testing import MethodConformance


class TestCutOutConformance(MethodConformance):
    def make_algorithm(self) -> CutOut:
        return CutOut(num_holes=2, length=0.25)

    def functional_calls(self):
        return {"cutout_batch": lambda x, y: cutout_batch(x, generator=torch.Generator().manual_seed(0))}
