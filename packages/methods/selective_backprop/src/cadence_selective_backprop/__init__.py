"""Selective Backprop (Jiang et al., 2019): back-propagate only the higher-loss samples of a batch.

`should_selective_backprop` says when, `select_using_loss` / `select_indices_using_loss` say
which samples; `SelectiveBackprop` applies them to the training batches.
"""

from cadence_selective_backprop.algorithm import SelectiveBackprop
from cadence_selective_backprop.functional import (
    select_indices_using_loss,
    select_using_loss,
    should_selective_backprop,
)

__all__ = ["SelectiveBackprop", "select_indices_using_loss", "select_using_loss", "should_selective_backprop"]
