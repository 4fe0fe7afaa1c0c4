"""AugMix against the contract every cadence method meets."""

from __future__ import annotations

import torch
from cadence_augmix import AugMix, augmix_batch, augmix_image

from cadence.testing import MethodConformance


class TestAugMixConformance(MethodConformance):
    def make_algorithm(self) -> AugMix:
        return AugMix()

    def functional_calls(self):
        return {
            "augmix_batch": lambda x, y: augmix_batch(x, generator=torch.Generator().manual_seed(0)),
            "augmix_image": lambda x, y: augmix_image(x),
        }
