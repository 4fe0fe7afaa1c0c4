"""`SqueezeExcite`: the Event adapter over `apply_squeeze_excite`."""

from __future__ import annotations

import torch
from torch import nn

from cadence.ops import SurgeryMethod, SurgeryReport, count_module_instances
from cadence_squeeze_excite.functional import apply_squeeze_excite, check_squeeze_excite_args
from cadence_squeeze_excite.layers import SqueezeExciteConv2d

__all__ = ["SqueezeExcite"]


class SqueezeExcite(SurgeryMethod):
    """Adds Squeeze-and-Excitation blocks after the wide convolutions once, on INIT (see `apply_squeeze_excite`)."""

    # INIT runs low orders first. After Factorize (10), which replaces convolutions first; before BlurPool (20),
    # so a block follows the whole blurred convolution (it pools the subsampled output, not the stride-1 one).
    order = 15

    def __init__(self, latent_channels: float = 64, min_channels: int = 128, *, strict: bool = False):
        check_squeeze_excite_args(latent_channels, min_channels)
        super().__init__(strict=strict)
        self.latent_channels, self.min_channels = latent_channels, min_channels

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_squeeze_excite(model, self.latent_channels, self.min_channels, optimizers, strict=self.strict)

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        return [{"squeeze_excite/num_squeeze_excite_layers": count_module_instances(model, SqueezeExciteConv2d)}]
