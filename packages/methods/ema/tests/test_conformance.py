"""EMA meets the contract every cadence method meets (mid-epoch exact resume with the average swapped in)."""

from __future__ import annotations

from cadence_ema import EMA

from cadence.testing import MethodConformance


class TestEMAConformance(MethodConformance):
    def make_algorithm(self) -> EMA:
        return EMA(half_life="2ba")
