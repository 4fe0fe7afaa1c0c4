"""`AugMix`: augments each training batch on its device, or the training dataset."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cadence.ops import AugmentationMethod, BatchKey
from cadence_augmix.functional import AugmentAndMixTransform, augmix_batch, check_augmix_args

__all__ = ["AugMix"]


class AugMix(AugmentationMethod):
    """AugMix (Hendrycks et al., 2020): each image mixed with `width` chains of random operations.

    ``batched=True``: `augmix_batch` on each batch at AFTER_DATALOADER, on its device.
    ``batched=False``: `AugmentAndMixTransform` added to the training dataset at FIT_START, as in
    Composer. Events, randomness (``seed``) and checkpointing as in `cadence.ops.AugmentationMethod`. Images are
    best unnormalised (uint8, or float in [0, 1]); normalised float images are augmented in each
    image's own [min, max] (as Composer, which trains on them too). The JSD consistency loss of the paper is not
    part of this method. See `augmix_image` for the arguments.
    """

    generators = {"augmix": "device"}

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[str] = "all",
        batched: bool = True,
        input_key: BatchKey = 0,
        *,
        seed: int | None = None,
    ):
        check_augmix_args(severity, depth, width, alpha, augmentation_set)
        self.severity, self.depth, self.width, self.alpha = severity, depth, width, alpha
        self.augmentation_set = augmentation_set
        super().__init__(batched, input_key, seed=seed)

    def augment_batch(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        args = (self.severity, self.depth, self.width, self.alpha, self.augmentation_set)
        return augmix_batch(images, *args, generator)

    def dataset_transform(self) -> AugmentAndMixTransform:
        return AugmentAndMixTransform(self.severity, self.depth, self.width, self.alpha, self.augmentation_set)
