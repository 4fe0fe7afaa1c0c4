"""LowPrecisionLayerNorm meets the contract every cadence method meets (in bf16 runs, where it acts)."""

from __future__ import annotations

from cadence_low_precision_layernorm import LowPrecisionLayerNorm, LPLayerNorm
from torch import nn

from cadence import Classifier
from cadence.testing import MethodConformance


class TestLowPrecisionLayerNormConformance(MethodConformance):
    precision = "amp_bf16"  # the method acts only under autocast (bf16 autocast runs on the CPU)

    def make_algorithm(self) -> LowPrecisionLayerNorm:
        return LowPrecisionLayerNorm(strict=True)  # the model must have LayerNorms to convert

    def make_model(self) -> nn.Module:
        """A small CNN whose head normalises its features with a LayerNorm."""
        module = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.LayerNorm(8), nn.Linear(8, self.num_classes),
        )  # fmt: skip
        return Classifier(module, num_classes=self.num_classes)

    def functional_calls(self):
        return {"LPLayerNorm": lambda x, y: LPLayerNorm(x.shape[-1], dtype=x.dtype)(x)}
