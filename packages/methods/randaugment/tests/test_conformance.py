"""RandAugment against the contract every cadence method meets."""

from __future__ import annotations

import torch
from cadence_randaugment import RandAugment, randaugment_batch, randaugment_image

from cadence.testing import MethodConformance


class TestRandAugmentConformance(MethodConformance):
    def make_algorithm(self) -> RandAugment:
        return RandAugment()

    def functional_calls(self):
        return {
            "randaugment_batch": lambda x, y: randaugment_batch(x, generator=torch.Generator().manual_seed(0)),
            "randaugment_image": lambda x, y: randaugment_image(x),
        }
