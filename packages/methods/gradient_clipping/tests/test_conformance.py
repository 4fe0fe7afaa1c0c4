"""GradientClipping meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_gradient_clipping import GradientClipping

from cadence.testing import MethodConformance


class TestGradientClippingConformance(MethodConformance):
    def make_algorithm(self) -> GradientClipping:
        return GradientClipping(clipping_type="adaptive", clipping_threshold=0.01)  # clips on every step here


class TestNormClippingConformance(MethodConformance):
    def make_algorithm(self) -> GradientClipping:
        return GradientClipping(clipping_type="norm", clipping_threshold=0.1)
