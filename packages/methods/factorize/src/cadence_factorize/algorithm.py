"""`Factorize`: the Event adapter over `apply_factorization`."""

from __future__ import annotations

import torch
from torch import nn

from cadence import Effects, Resource
from cadence.ops import SurgeryMethod, SurgeryReport, count_module_instances
from cadence_factorize.functional import apply_factorization, check_factorize_args
from cadence_factorize.layers import FactorizedConv2d, FactorizedLinear

__all__ = ["Factorize"]


class Factorize(SurgeryMethod):
    """Factorizes wide Conv2d and Linear layers on INIT (see `apply_factorization`).

    The defaults are Composer's class defaults, which differ from its function's: ``min_channels=256``,
    ``min_features=256`` and ``latent_features=128`` (the function: 512, 512 and 0.25).
    """

    order = 10  # first of the convolution surgeries: BlurPool, SqueezeExcite and WS (90) then see its layers

    def __init__(
        self,
        factorize_convs: bool = True,
        factorize_linears: bool = True,
        min_channels: int = 256,
        latent_channels: float = 0.25,
        min_features: int = 256,
        latent_features: float = 128,
        *,
        strict: bool = False,
    ):
        check_factorize_args(
            factorize_convs, factorize_linears, min_channels, latent_channels, min_features, latent_features
        )
        super().__init__(strict=strict)
        self.factorize_convs, self.factorize_linears = factorize_convs, factorize_linears
        self.min_channels, self.latent_channels = min_channels, latent_channels
        self.min_features, self.latent_features = min_features, latent_features

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_factorization(
            model, self.factorize_convs, self.factorize_linears, self.min_channels, self.latent_channels,
            self.min_features, self.latent_features, optimizers, strict=self.strict,
        )  # fmt: skip

    def composer_hyperparameters(self, model: nn.Module) -> list[dict[str, int]]:
        logged = []  # Composer logs each kind in its own call, and only when it is switched on
        if self.factorize_convs:
            logged.append({"factorize/num_conv2d_replacements": count_module_instances(model, FactorizedConv2d)})
        if self.factorize_linears:
            logged.append({"factorize/num_linear_replacements": count_module_instances(model, FactorizedLinear)})
        return logged

    def effects(self) -> Effects:
        # new layers whose weights approximate the old ones; their parameters replace the old in the optimizer
        return Effects(writes={Resource.MODEL, Resource.WEIGHTS, Resource.OPTIMIZER})
