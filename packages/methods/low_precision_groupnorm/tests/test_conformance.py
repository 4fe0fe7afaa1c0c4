"""LowPrecisionGroupNorm meets the contract every cadence method meets, training under bf16 autocast."""

from __future__ import annotations

from cadence_low_precision_groupnorm import LowPrecisionGroupNorm
from torch import nn

from cadence import Classifier
from cadence.testing import MethodConformance


class TestLowPrecisionGroupNormConformance(MethodConformance):
    precision = "amp_bf16"  # the method acts only under autocast (bf16 autocast runs on the CPU)

    def make_algorithm(self) -> LowPrecisionGroupNorm:
        return LowPrecisionGroupNorm()

    def make_model(self) -> nn.Module:
        """The TinyCNN's shape with GroupNorm (affine and not): the layers the method replaces."""
        module = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.GroupNorm(4, 16, affine=False),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, self.num_classes),
        )
        return Classifier(module, num_classes=self.num_classes)
