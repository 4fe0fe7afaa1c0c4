"""Sharpness-Aware Minimization (SAM) for cadence.

Foret, Kleiner, Mobahi and Neyshabur, "Sharpness-Aware Minimization for Efficiently Improving
Generalization", ICLR 2021. `SAMOptimizer` wraps any torch optimizer in your own loop; `SAM` is
the method for `cadence.Trainer`.
"""

from cadence_sam.algorithm import SAM as SAM
from cadence_sam.functional import SAMOptimizer as SAMOptimizer
from cadence_sam.functional import check_sam_args as check_sam_args

__all__ = ["SAM", "SAMOptimizer", "check_sam_args"]
