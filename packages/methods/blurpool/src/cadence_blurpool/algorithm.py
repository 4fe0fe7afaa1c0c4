"""`BlurPool`: the Event adapter over `apply_blurpool`."""

from __future__ import annotations

import torch
from torch import nn

from cadence.ops import SurgeryMethod, SurgeryReport, count_module_instances
from cadence_blurpool.functional import apply_blurpool, check_blurpool_args
from cadence_blurpool.layers import BlurConv2d, BlurMaxPool2d

__all__ = ["BlurPool"]


class BlurPool(SurgeryMethod):
    """Anti-aliases the model's strided convolutions and max-pools once, on INIT (see `apply_blurpool`)."""

    # INIT runs low orders first. After Factorize (10) and SqueezeExcite (15), whose blocks then wrap the whole
    # blurred convolution; before WeightStandardization (90), which then standardises the wrapped convolutions.
    order = 20

    def __init__(
        self,
        replace_convs: bool = True,
        replace_maxpools: bool = True,
        blur_first: bool = True,
        min_channels: int = 16,
        *,
        strict: bool = False,
    ):
        check_blurpool_args(replace_convs, replace_maxpools, blur_first, min_channels)
        super().__init__(strict=strict)
        self.replace_convs, self.replace_maxpools = replace_convs, replace_maxpools
        self.blur_first, self.min_channels = blur_first, min_channels

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_blurpool(
            model,
            self.replace_convs,
            self.replace_maxpools,
            self.blur_first,
            self.min_channels,
            optimizers,
            strict=self.strict,
        )

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        return [
            {
                "blurpool/num_blurpool_layers": count_module_instances(model, BlurMaxPool2d),
                "blurpool/num_blurconv_layers": count_module_instances(model, BlurConv2d),
            }
        ]
