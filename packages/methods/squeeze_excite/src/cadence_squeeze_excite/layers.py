"""Squeeze-and-Excitation layers (Hu et al., 2018), in Composer's structure, for surgery or by hand.

A convolution sees a local window only. An SE block "squeezes" each channel to its global average,
passes the vector through a small bottleneck MLP and "excites" the channels with the sigmoid of its
output: a per-image, per-channel gain computed from the whole image. The parameter names follow
Composer's (``se.pool_and_mlp.2.weight``, ...), so state dicts correspond one to one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["SqueezeExcite2d", "SqueezeExciteConv2d"]


def _latent_width(num_features: int, latent_channels: float) -> int:
    """The bottleneck width: `latent_channels` itself when >= 1, else that fraction of `num_features`."""
    width = int(latent_channels if latent_channels >= 1 else latent_channels * num_features)
    if width < 1:
        raise ValueError(
            f"`latent_channels`={latent_channels!r} gives {width} latent channels for {num_features} channels; "
            "pass a larger fraction, or a width >= 1"
        )
    return width


class SqueezeExcite2d(nn.Module):
    """Rescales each channel of ``(N, C, H, W)`` inputs by a gain in (0, 1) computed from all of the image.

    Args:
        num_features: C, the number of input channels.
        latent_channels: the MLP's hidden width; below 1, a fraction of `num_features`.
    """

    def __init__(self, num_features: int, latent_channels: float = 0.125):
        super().__init__()
        self.latent_channels = _latent_width(num_features, latent_channels)
        self.pool_and_mlp = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(num_features, self.latent_channels, bias=False),
            nn.ReLU(),
            nn.Linear(self.latent_channels, num_features, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input * self.pool_and_mlp(input)[:, :, None, None]  # no shape unpacking: FX traces it


class SqueezeExciteConv2d(nn.Module):
    """A `torch.nn.Conv2d` followed by a `SqueezeExcite2d` over its output channels.

    Built from `torch.nn.Conv2d`'s arguments, or around an existing convolution (``conv=``, or
    `from_conv2d`), which is kept as ``self.conv`` with its parameters.
    """

    def __init__(self, *args: Any, latent_channels: float = 0.125, conv: nn.Conv2d | None = None, **kwargs: Any):
        super().__init__()
        self.conv = nn.Conv2d(*args, **kwargs) if conv is None else conv
        self.se = SqueezeExcite2d(self.conv.out_channels, latent_channels)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.se(self.conv(input))

    @classmethod
    def from_conv2d(
        cls, module: nn.Conv2d, module_index: int = -1, latent_channels: float = 0.125
    ) -> SqueezeExciteConv2d:
        """`module` itself followed by a new SE block (on `module`'s device and dtype, in its train/eval mode)."""
        del module_index  # Composer's signature
        return cls(conv=module, latent_channels=latent_channels).train(module.training)
