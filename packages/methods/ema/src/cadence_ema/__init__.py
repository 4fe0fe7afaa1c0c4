"""EMA for cadence: evaluate an exponential moving average of the weights (Polyak averaging).

`compute_ema` is the update for your own training loop (with `ema_weights` and `swap_weights` to keep
one averaged copy and swap it in); `EMA` is the method for `cadence.Trainer`.
"""

from cadence_ema.algorithm import EMA, check_ema_args
from cadence_ema.functional import compute_ema, ema_weights, smoothing_from_half_life, swap_weights

__all__ = ["EMA", "check_ema_args", "compute_ema", "ema_weights", "smoothing_from_half_life", "swap_weights"]
