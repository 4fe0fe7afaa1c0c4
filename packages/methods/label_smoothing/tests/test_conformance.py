"""The cadence method contract, for LabelSmoothing (its functional maps targets, not images)."""

from __future__ import annotations

from cadence_label_smoothing import LabelSmoothing

from cadence import Algorithm
from cadence.testing import MethodConformance


class TestLabelSmoothingConformance(MethodConformance):
    def make_algorithm(self) -> Algorithm:
        return LabelSmoothing(smoothing=0.1)
