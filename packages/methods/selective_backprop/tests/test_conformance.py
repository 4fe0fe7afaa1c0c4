"""SelectiveBackprop meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_selective_backprop import SelectiveBackprop, select_using_loss
from torch.nn import functional as F

from cadence.testing import MethodConformance


def _first_channel_mean(x):
    return x.mean(dim=(2, 3))  # (N, C): logits of a fixed "model"


class TestSelectiveBackpropConformance(MethodConformance):
    """Active on every batch, so every check exercises the pruning."""

    def make_algorithm(self) -> SelectiveBackprop:
        return SelectiveBackprop(start=0.0, end=1.0, keep=0.5, scale_factor=0.5, interrupt=0)

    def functional_calls(self):
        # keep=1 returns the batch (shape-preserving); the pruning itself is tested in test_functional.py
        return {
            "select_using_loss": lambda x, y: select_using_loss(
                x, y % 3, _first_channel_mean, F.cross_entropy, keep=1.0
            )[0]
        }


class TestSelectiveBackpropDefaultsConformance(TestSelectiveBackpropConformance):
    def make_algorithm(self) -> SelectiveBackprop:
        return SelectiveBackprop()
