"""The cadence method contract, for CutMix in both of its modes."""

from __future__ import annotations

from collections.abc import Callable

import torch
from cadence_cutmix import CutMix, cutmix_batch

from cadence import Algorithm
from cadence.testing import MethodConformance


class TestCutMixConformance(MethodConformance):
    functional_dtypes = (torch.float32, torch.float64, torch.bfloat16, torch.uint8)

    def make_algorithm(self) -> Algorithm:
        return CutMix(alpha=1.0)

    def functional_calls(self) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        generator = torch.Generator().manual_seed(0)
        return {
            "cutmix_batch": lambda x, y: cutmix_batch(x, y, generator=generator)[0],
            "cutmix_batch(uniform_sampling=True)": lambda x, y: cutmix_batch(
                x, y, uniform_sampling=True, generator=generator
            )[0],
        }


class TestCutMixInterpolateLossConformance(MethodConformance):
    def make_algorithm(self) -> Algorithm:
        return CutMix(alpha=0.5, interpolate_loss=True, uniform_sampling=True)
