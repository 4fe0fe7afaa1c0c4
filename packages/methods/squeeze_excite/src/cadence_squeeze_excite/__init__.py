"""Squeeze-and-Excitation for cadence: channel attention after the wide convolutions (Hu et al., CVPR 2018).

`apply_squeeze_excite` changes a model for your own training loop; `SqueezeExcite` is the method
for `cadence.Trainer`; `SqueezeExcite2d` and `SqueezeExciteConv2d` build SE models by hand.
"""

from cadence_squeeze_excite.algorithm import SqueezeExcite
from cadence_squeeze_excite.functional import apply_squeeze_excite
from cadence_squeeze_excite.layers import SqueezeExcite2d, SqueezeExciteConv2d

__all__ = ["SqueezeExcite", "SqueezeExcite2d", "SqueezeExciteConv2d", "apply_squeeze_excite"]
