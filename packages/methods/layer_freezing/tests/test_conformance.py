"""LayerFreezing meets the contract every cadence method meets.

The mid-epoch checkpoint of the conformance run (batch 3 of 4) comes before the first EPOCH_END,
and both runs then freeze two of the TinyCNN's four layers at batch 4; test_algorithm.py resumes
from a checkpoint written after layers froze.
"""

from __future__ import annotations

from cadence_layer_freezing import LayerFreezing

from cadence.testing import MethodConformance


class TestLayerFreezingConformance(MethodConformance):
    def make_algorithm(self) -> LayerFreezing:
        return LayerFreezing(freeze_start=0.0, freeze_level=1.0)
