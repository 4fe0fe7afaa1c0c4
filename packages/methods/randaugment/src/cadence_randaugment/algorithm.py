"""`RandAugment`: augments each training batch on its device, or the training dataset."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cadence.ops import AugmentationMethod, BatchKey
from cadence_randaugment.functional import RandAugmentTransform, check_randaugment_args, randaugment_batch

__all__ = ["RandAugment"]


class RandAugment(AugmentationMethod):
    """RandAugment (Cubuk et al., 2020): `depth` random operations of strength `severity` per image.

    ``batched=True``: `randaugment_batch` on each batch at AFTER_DATALOADER, on its device.
    ``batched=False``: `RandAugmentTransform` added to the training dataset at FIT_START, as in
    Composer. Events, randomness (``seed``) and checkpointing as in `cadence.ops.AugmentationMethod`.
    Images are best unnormalised (uint8, or float in [0, 1]); normalised float images are augmented
    in each image's own [min, max] (as Composer, which trains on them too).
    See `randaugment_image` for the arguments.
    """

    generators = {"randaugment": "device"}
    # before AugMix (50) on AFTER_DATALOADER (high runs first there), and so also in the dataset: two augmentations of
    # one order would run in the order the `algorithms` list gives, and so would the result
    order = 55

    def __init__(
        self,
        severity: float = 9,
        depth: int = 2,
        augmentation_set: str | Sequence[str] = "all",
        batched: bool = True,
        input_key: BatchKey = 0,
        *,
        seed: int | None = None,
    ):
        check_randaugment_args(severity, depth, augmentation_set)
        self.severity, self.depth, self.augmentation_set = severity, depth, augmentation_set
        super().__init__(batched, input_key, seed=seed)

    def augment_batch(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return randaugment_batch(images, self.severity, self.depth, self.augmentation_set, generator)

    def dataset_transform(self) -> RandAugmentTransform:
        return RandAugmentTransform(self.severity, self.depth, self.augmentation_set)
