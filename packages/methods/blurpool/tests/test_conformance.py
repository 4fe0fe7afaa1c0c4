"""BlurPool meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_blurpool import BlurPool, blur_2d

from cadence.testing import MethodConformance


class TestBlurPoolConformance(MethodConformance):
    def make_algorithm(self) -> BlurPool:
        return BlurPool(min_channels=8)  # the TinyCNN's strided convolution has 8 input channels

    def functional_calls(self):
        return {"blur_2d": lambda x, y: blur_2d(x)}
