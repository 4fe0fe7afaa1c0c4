"""MixUp for cadence: train on convex combinations of pairs of examples and of their labels.

Zhang et al., "mixup: Beyond Empirical Risk Minimization", ICLR 2018. `mixup_batch` is the
function for your own training loop; `MixUp` is the method for `cadence.Trainer`.
"""

from cadence_mixup.algorithm import MixUp as MixUp
from cadence_mixup.functional import mixup_batch as mixup_batch

__all__ = ["MixUp", "mixup_batch"]
