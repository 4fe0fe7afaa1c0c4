"""ChannelsLast for cadence: the model's 4-D weights in the channels_last (NHWC) memory format.

`apply_channels_last` changes a model for your own training loop; `ChannelsLast` is the method for
`cadence.Trainer`.
"""

from cadence_channels_last.algorithm import ChannelsLast
from cadence_channels_last.functional import apply_channels_last

__all__ = ["ChannelsLast", "apply_channels_last"]
