"""`ChannelsLast`: the Event adapter over `apply_channels_last`."""

from __future__ import annotations

import torch
from torch import nn

from cadence import Effects, Resource
from cadence.ops import SurgeryMethod, SurgeryReport
from cadence_channels_last.functional import apply_channels_last

__all__ = ["ChannelsLast"]


class ChannelsLast(SurgeryMethod):
    """Stores the model's 4-D weights in channels_last once, on INIT (see `apply_channels_last`)."""

    # INIT runs low orders first: after the surgeries that add layers (10-30), whose new 4-D weights it then
    # converts too. Ties with WeightStandardization (90): either order gives the same tensors.
    order = 90

    def __init__(self, *, strict: bool = False):
        super().__init__(strict=strict)

    @staticmethod
    def required_on_load() -> bool:
        return False  # a layout, not a structure: checkpoints load into either format (values are copied)

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_channels_last(model, strict=self.strict)

    def effects(self) -> Effects:
        return Effects(writes={Resource.MODEL})  # the weights' memory layout; values and optimizer untouched
