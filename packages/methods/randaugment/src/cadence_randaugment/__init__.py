"""RandAugment for cadence: random image operations per sample, on the device or in the dataset.

``RandAugment()`` augments each training batch on its device (``randaugment_batch``);
``RandAugment(batched=False)`` adds ``RandAugmentTransform`` to the training dataset instead,
as Composer does. ``randaugment()`` builds the transform for your own pipeline.
"""

from cadence_randaugment.algorithm import RandAugment
from cadence_randaugment.functional import RandAugmentTransform, randaugment, randaugment_batch, randaugment_image

__all__ = ["RandAugment", "RandAugmentTransform", "randaugment", "randaugment_batch", "randaugment_image"]
