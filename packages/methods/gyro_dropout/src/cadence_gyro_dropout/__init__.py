"""Gyro Dropout (Lee et al., MLSys 2022): dropout over a fixed pool of pre-selected sub-networks, a few per step.

`apply_gyro_dropout` replaces a model's ``nn.Dropout`` layers by `GyroDropoutLayer`s; `GyroDropout`
does it for `cadence.Trainer`, with the run's length and a checkpointed generator.
"""

from cadence_gyro_dropout.algorithm import GyroDropout
from cadence_gyro_dropout.functional import apply_gyro_dropout
from cadence_gyro_dropout.layers import GyroDropoutLayer

__all__ = ["GyroDropout", "GyroDropoutLayer", "apply_gyro_dropout"]
