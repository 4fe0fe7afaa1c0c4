"""Factorize meets the contract every cadence method meets (exact mid-epoch resume included)."""

from __future__ import annotations

from cadence_factorize import Factorize

from cadence.testing import MethodConformance


class TestFactorizeConformance(MethodConformance):
    def make_algorithm(self) -> Factorize:
        # the TinyCNN's 8 -> 16 3x3 convolution (break-even 13 channels) and its 16 -> 4 head (break-even 3)
        return Factorize(min_channels=8, latent_channels=4, min_features=4, latent_features=1)
