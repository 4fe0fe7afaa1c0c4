"""CutMix for cadence: paste a box from another example of the batch and mix the labels by area.

Yun et al., "CutMix: Regularization Strategy to Train Strong Classifiers with Localizable
Features", ICCV 2019. `cutmix_batch` is the function for your own training loop; `CutMix` is
the method for `cadence.Trainer`.
"""

from cadence_cutmix.algorithm import CutMix as CutMix
from cadence_cutmix.functional import cutmix_batch as cutmix_batch

__all__ = ["CutMix", "cutmix_batch"]
