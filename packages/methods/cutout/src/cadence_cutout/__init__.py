"""CutOut (DeVries & Taylor, 2017): zero random square holes in training images.

`cutout_batch` is the pure tensor function; `CutOut` applies it to every training batch.
"""

from cadence_cutout.algorithm import CutOut
from cadence_cutout.functional import cutout_batch

__all__ = ["CutOut", "cutout_batch"]
