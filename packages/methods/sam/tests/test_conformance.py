"""SAM meets the contract every cadence method meets (interval 2: its resume lands before a SAM step)."""

from __future__ import annotations

from cadence_sam import SAM

from cadence.testing import MethodConformance


class TestSAMConformance(MethodConformance):
    def make_algorithm(self) -> SAM:
        return SAM(rho=0.05, interval=2)
