"""LowPrecisionGroupNorm meets the contract every cadence method meets, training under bf16 autocast."""

from __future__ import annotations

from typing import Any

from cadence_low_precision_groupnorm import LowPrecisionGroupNorm
from torch import nn

from cadence import Classifier, Trainer
from cadence.testing import MethodConformance


class TestLowPrecisionGroupNormConformance(MethodConformance):
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

    def _trainer(self, algorithms: list, **kwargs: Any) -> Trainer:
        # the method does something only under autocast (bf16 autocast runs on the CPU); the kit has no
        # precision setting, so its one trainer factory is extended here
        return super()._trainer(algorithms, precision="amp_bf16", **kwargs)
