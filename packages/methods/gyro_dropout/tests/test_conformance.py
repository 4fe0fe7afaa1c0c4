"""GyroDropout meets the contract every cadence method meets, on a small CNN with a dropout layer."""

from __future__ import annotations

import torch
from cadence_gyro_dropout import GyroDropout, GyroDropoutLayer
from torch import nn

from cadence import Classifier
from cadence.testing import MethodConformance


def dropout_classifier(num_classes: int = 4) -> Classifier:
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(32, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, num_classes),
    )  # fmt: skip
    return Classifier(module, num_classes=num_classes)


class TestGyroDropoutConformance(MethodConformance):
    def make_model(self) -> nn.Module:
        return dropout_classifier(self.num_classes)

    def make_algorithm(self) -> GyroDropout:
        return GyroDropout(p=0.5, sigma=4, tau=2)  # 6 steps: period int(6 / 4) * 2 = 2, a new pick every 2 steps

    def functional_calls(self):
        def call(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return GyroDropoutLayer(10, 1, 0.5, sigma=4, tau=2, generator=torch.Generator())(x)

        return {"GyroDropoutLayer": call}
