"""`MixUp`: the Event adapter around `mixup_batch`."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from cadence import Effects, State
from cadence.ops import BatchKey, LabelMixingMethod, random_permutation
from cadence_mixup.functional import check_alpha, mixup_batch, sample_mixing

__all__ = ["MixUp"]


class MixUp(LabelMixingMethod):
    """Trains on convex combinations of pairs of examples and of their labels (see `mixup_batch`).

    Events as in `cadence.ops.LabelMixingMethod`: INIT creates its generators (``seed`` fixes them);
    BEFORE_FORWARD mixes the inputs; BEFORE_LOSS replaces the targets by dense mixed targets and
    AFTER_LOSS puts the original targets back (with ``interpolate_loss=True``, AFTER_LOSS interpolates
    the loss instead). Every microbatch draws its own coefficient ``mixing`` and partners ``indices``.
    """

    order = 20  # inside LabelSmoothing (10), outside CutMix (30): see the card's Composition section
    generators = {"mixup/permutation": "device", "mixup/mixing": "cpu"}  # the coefficient is a Python float

    def __init__(
        self,
        alpha: float = 0.2,
        interpolate_loss: bool = False,
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
        *,
        seed: int | None = None,
    ):
        self.alpha = check_alpha(alpha)
        super().__init__(interpolate_loss, input_key, target_key, seed=seed)
        self.mixing = 0.0

    def mix(self, input: torch.Tensor, target: Any, state: State) -> torch.Tensor:
        mixing = sample_mixing(self.alpha, self.generator("mixup/mixing"))
        indices = random_permutation(input.shape[0], input.device, self.generator("mixup/permutation"))
        mixed, self.permuted_target, self.mixing = mixup_batch(input, target, mixing, indices=indices)
        self.indices, self.partner_weight = indices, self.mixing
        return mixed

    def effects(self) -> Effects:
        if not self.interpolate_loss:
            return super().effects()
        fix = (
            "MixUp(interpolate_loss=True) must be the innermost method that changes the targets, but CutMix "
            f"(order 30) mixes them inside MixUp (order {self.order}), so the interpolated loss would use the "
            "wrong labels. Use MixUp(interpolate_loss=False): dense mixed targets give the same cross-entropy, "
            "and CutMix may keep interpolate_loss=True"
        )
        return dataclasses.replace(super().effects(), conflicts={"CutMix": fix})
