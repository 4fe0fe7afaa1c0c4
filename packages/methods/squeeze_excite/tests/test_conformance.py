"""SqueezeExcite meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_squeeze_excite import SqueezeExcite

from cadence.testing import MethodConformance


class TestSqueezeExciteConformance(MethodConformance):
    def make_algorithm(self) -> SqueezeExcite:
        return SqueezeExcite(latent_channels=0.5, min_channels=8)  # the TinyCNN's 8 -> 16 convolution
