"""StochasticDepth meets the contract every cadence method meets (block and sample modes)."""

from __future__ import annotations

import torch
from cadence_stochastic_depth import StochasticBlock, StochasticDepth
from torch import nn

from cadence import Classifier
from cadence.testing import MethodConformance


class ResidualBlock(nn.Module):
    """A block that follows the residual contract: act(shortcut(x) + branch(x)), parts named as such."""

    def __init__(self, channels: int):
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        self.shortcut = None
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.branch(x))


def residual_classifier(num_classes: int = 4) -> Classifier:
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), ResidualBlock(8), ResidualBlock(8),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes),
    )  # fmt: skip
    return Classifier(module, num_classes=num_classes)


class TestStochasticDepthBlockConformance(MethodConformance):
    def make_model(self) -> nn.Module:
        return residual_classifier(self.num_classes)

    def make_algorithm(self) -> StochasticDepth:
        return StochasticDepth(ResidualBlock, "block", drop_rate=0.6, drop_warmup="2ba")

    def functional_calls(self):
        def call(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            layer = StochasticBlock(ResidualBlock(3).to(x.dtype), 0.5, "sample", generator=torch.Generator())
            return layer(x)

        return {"StochasticBlock": call}


class TestStochasticDepthSampleConformance(TestStochasticDepthBlockConformance):
    def make_algorithm(self) -> StochasticDepth:
        return StochasticDepth(ResidualBlock, "sample", drop_rate=0.5, drop_distribution="uniform")
