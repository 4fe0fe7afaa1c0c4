"""WeightStandardization meets the contract every cadence method meets (exact mid-epoch resume included)."""

from __future__ import annotations

from cadence_weight_standardization import WeightStandardization

from cadence.testing import MethodConformance


class TestWeightStandardizationConformance(MethodConformance):
    def make_algorithm(self) -> WeightStandardization:
        return WeightStandardization()  # both convolutions of the TinyCNN
