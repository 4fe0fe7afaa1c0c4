"""DecoupledWeightDecay meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_decoupled_weight_decay import DecoupledWeightDecay

from cadence.testing import MethodConformance


class TestDecoupledWeightDecayConformance(MethodConformance):
    def make_algorithm(self) -> DecoupledWeightDecay:
        return DecoupledWeightDecay(weight_decay=1e-2)
