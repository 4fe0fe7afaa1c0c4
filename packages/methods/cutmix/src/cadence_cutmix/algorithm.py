"""`CutMix`: the Event adapter around `cutmix_batch`."""

from __future__ import annotations

from typing import Any

import torch

from cadence import State
from cadence.ops import BatchKey, LabelMixingMethod, check_bool, random_permutation
from cadence_cutmix.functional import check_alpha, cutmix_batch, is_segmentation_target, paste_box, sample_bbox

__all__ = ["CutMix"]


class CutMix(LabelMixingMethod):
    """Pastes a box from another example of the batch and mixes the labels by area (see `cutmix_batch`).

    Events as in `cadence.ops.LabelMixingMethod`: INIT creates its generators (``seed`` fixes them);
    BEFORE_FORWARD pastes the box (``bbox``) into the inputs; BEFORE_LOSS replaces the targets by
    ``area * y + (1 - area) * y[indices]`` (dense; segmentation targets take the box) and AFTER_LOSS puts
    the original targets back. With ``interpolate_loss=True``, AFTER_LOSS interpolates the loss instead.
    Every microbatch draws its own box and partners. After a step, ``indices``, ``permuted_target``,
    ``area`` (Composer's adjusted lambda: the share of each image kept) and ``bbox`` describe it
    (Composer's ``_indices``, ``_permuted_target``, ``_adjusted_lambda`` and ``_bbox`` read the same).
    """

    order = 30  # the innermost of LabelSmoothing (10), MixUp (20), CutMix: see the card's Composition section
    generators = {"cutmix/permutation": "device", "cutmix/box": "cpu"}  # the box is Python ints

    def __init__(
        self,
        alpha: float = 1.0,
        interpolate_loss: bool = False,
        uniform_sampling: bool = False,
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
        *,
        seed: int | None = None,
    ):
        self.alpha = check_alpha(alpha)
        self.uniform_sampling = check_bool("uniform_sampling", uniform_sampling)
        super().__init__(interpolate_loss, input_key, target_key, seed=seed)
        self.bbox, self.area = (0, 0, 0, 0), 1.0

    def mix(self, input: torch.Tensor, target: Any, state: State) -> torch.Tensor:
        if self.interpolate_loss and is_segmentation_target(target, input):
            raise ValueError(
                "CutMix(interpolate_loss=True) cannot interpolate the loss of segmentation "
                "targets (the box is pasted into them); use interpolate_loss=False"
            )
        height, width = input.shape[-2:]
        box = sample_bbox(height, width, None, self.alpha, self.uniform_sampling, self.generator("cutmix/box"))
        indices = random_permutation(input.shape[0], input.device, self.generator("cutmix/permutation"))
        mixed, self.permuted_target, self.area, self.bbox = cutmix_batch(input, target, bbox=box, indices=indices)
        self.indices, self.partner_weight = indices, 1.0 - self.area
        return mixed

    # Composer's CutMix keeps its draws under private names; the same values, read-only, for code that reads them
    @property
    def _indices(self) -> torch.Tensor:
        return self.indices

    @property
    def _permuted_target(self) -> Any:
        return self.permuted_target

    @property
    def _adjusted_lambda(self) -> float:
        return self.area

    @property
    def _bbox(self) -> tuple[int, int, int, int]:
        return self.bbox

    def mix_targets(self, target: torch.Tensor, state: State) -> torch.Tensor:
        if is_segmentation_target(target, state.batch_get_item(self.input_key)):
            return paste_box(target, self.indices, self.bbox)  # type: ignore[arg-type]
        return super().mix_targets(target, state)
