"""AugMix for cadence: mixes random augmentation chains per sample, on the device or in the dataset.

``AugMix()`` augments each training batch on its device (``augmix_batch``);
``AugMix(batched=False)`` adds ``AugmentAndMixTransform`` to the training dataset instead, as
Composer does. ``augmix()`` builds the transform for your own pipeline.
"""

from cadence_augmix.algorithm import AugMix
from cadence_augmix.functional import AugmentAndMixTransform, augmix, augmix_batch, augmix_image

__all__ = ["AugMix", "AugmentAndMixTransform", "augmix", "augmix_batch", "augmix_image"]
