"""ColOut: drop random rows and columns of training images, a cheap jittered downsizing.

`colout_batch` is the pure function, `ColOutTransform` the per-image dataset transform,
and `ColOut` applies it to every training batch.
"""

from cadence_colout.algorithm import ColOut
from cadence_colout.functional import ColOutTransform, colout_batch

__all__ = ["ColOut", "ColOutTransform", "colout_batch"]
