"""The cadence method contract, for MixUp in both of its modes."""

from __future__ import annotations

from collections.abc import Callable

import torch
from cadence_mixup import MixUp, mixup_batch

from cadence import Algorithm
from cadence.testing import MethodConformance


class TestMixUpConformance(MethodConformance):
    def make_algorithm(self) -> Algorithm:
        return MixUp(alpha=0.4)

    def functional_calls(self) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        generator = torch.Generator().manual_seed(0)
        return {"mixup_batch": lambda x, y: mixup_batch(x, y, alpha=0.4, generator=generator)[0]}


class TestMixUpInterpolateLossConformance(MethodConformance):
    def make_algorithm(self) -> Algorithm:
        return MixUp(alpha=1.0, interpolate_loss=True)
