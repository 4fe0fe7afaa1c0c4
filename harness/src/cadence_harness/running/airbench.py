"""An airbench-class CIFAR-10 network: a strong baseline that trains in seconds on a GPU.

Written from the published description (Jordan 2024, "94% on CIFAR-10 in 3.29 Seconds on a Single
GPU", arXiv 2404.00498), not copied from its code:

* a first 2x2 convolution (24 channels) that *whitens* input patches: its weights are the
  eigenvectors of the training patches' covariance scaled by 1/sqrt(eigenvalue), with their
  negatives (`whiten_from_images`), and stay frozen; its bias trains for the first
  `whiten_bias_fraction` of the run only (`FreezeWhiteningBias`);
* three conv groups (conv, 2x2 max-pool, batch norm, GELU, conv, batch norm, GELU) of 64, 256 and
  256 channels; convolutions start as identities (Dirac on their first input channels), batch norms
  learn only their bias (weight fixed at 1, momentum 0.6 in the paper's convention, eps 1e-12);
* a global max-pool, a linear layer without bias, and the logits scaled by 1/9;
* label smoothing 0.2 in the loss, and test-time augmentation (`tta_level`: 1 = the mirror image,
  2 = also two 1-pixel translations, averaged as the paper does).

The rest of the published recipe lives where the harness keeps such things: the alternating flip
and 2-pixel translation are the loader's ``augment = "alt_flip_translate"``, Lookahead is
`cadence_harness.running.lookahead`, the batch-size-scaled SGD with a larger rate for batch-norm biases is
the recipe's optimizer (``norm_lr_scale``). One deliberate difference: the final max-pool is global
(`nn.AdaptiveMaxPool2d`), which equals the paper's 3x3 pool at 32 px and also accepts the smaller
inputs of progressive resizing and ColOut.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.models import Classifier
from cadence.ops.targets import soft_cross_entropy

__all__ = [
    "AirbenchClassifier",
    "FreezeWhiteningBias",
    "airbench_network",
    "tta_logits",
    "whiten_from_images",
]

WIDTHS = (64, 256, 256)
WHITEN_KERNEL = 2


def _batch_norm(channels: int, momentum: float) -> nn.BatchNorm2d:
    """Batch norm that learns only its bias; `momentum` in the paper's convention (weight of the old mean). A
    plain `nn.BatchNorm2d`, so surgery that replaces batch norms (Ghost BatchNorm) finds it."""
    norm = nn.BatchNorm2d(channels, eps=1e-12, momentum=1 - momentum)
    norm.weight.requires_grad_(False)
    return norm


def _identity_conv(channels_in: int, channels_out: int) -> nn.Conv2d:
    """A 3x3 'same' convolution without bias that starts as the identity on its first input channels (the rest
    at PyTorch's default initialisation). A plain `nn.Conv2d`, so surgery finds it."""
    conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, padding="same", bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[: min(channels_in, channels_out)])
    return conv


class ConvGroup(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, bn_momentum: float):
        super().__init__()
        self.conv1 = _identity_conv(channels_in, channels_out)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = _batch_norm(channels_out, bn_momentum)
        self.conv2 = _identity_conv(channels_out, channels_out)
        self.norm2 = _batch_norm(channels_out, bn_momentum)
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activation(self.norm1(self.pool(self.conv1(x))))
        return self.activation(self.norm2(self.conv2(x)))


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


def airbench_network(
    num_classes: int = 10,
    in_channels: int = 3,
    widths: Sequence[int] = WIDTHS,
    bn_momentum: float = 0.6,
    scale: float = 1 / 9,
) -> nn.Sequential:
    """The network (without input normalisation); call `whiten_from_images` on ``network.whiten`` before training."""
    if len(widths) != 3 or not all(isinstance(w, int) and w > 0 for w in widths):
        raise ValueError(f"`widths` = {widths!r}: give three positive channel counts, e.g. [64, 256, 256]")
    if not 0.0 <= bn_momentum < 1.0:
        raise ValueError(f"`bn_momentum` = {bn_momentum!r} must be in [0, 1) (the weight of the running mean)")
    whiten_width = 2 * in_channels * WHITEN_KERNEL**2
    whiten = nn.Conv2d(in_channels, whiten_width, WHITEN_KERNEL, padding=0, bias=True)
    whiten.weight.requires_grad_(False)
    assert whiten.bias is not None  # built with bias=True
    nn.init.zeros_(whiten.bias)
    channels = [whiten_width, *widths]
    layers: list[tuple[str, nn.Module]] = [("whiten", whiten), ("whiten_act", nn.GELU())]
    layers += [(f"group{i + 1}", ConvGroup(channels[i], channels[i + 1], bn_momentum)) for i in range(3)]
    layers += [
        ("pool", nn.AdaptiveMaxPool2d(1)),
        ("flatten", nn.Flatten()),
        ("head", nn.Linear(widths[-1], num_classes, bias=False)),
        ("scale", Scale(scale)),
    ]
    return nn.Sequential(OrderedDict(layers))


@torch.no_grad()
def whiten_from_images(conv: nn.Conv2d, images: torch.Tensor, eps: float = 5e-4) -> None:
    """Set `conv`'s weights to whiten its input patches: the eigenvectors of the patches' covariance (largest
    first) scaled by 1/sqrt(eigenvalue + eps), then the same negated. `images` are normalised as the network
    will see them, (N, C, H, W)."""
    c, (h, w) = images.shape[1], conv.kernel_size
    if conv.out_channels != 2 * c * h * w or conv.in_channels != c:
        raise ValueError(
            f"the whitening conv must map {c} channels to 2*{c}*{h}*{w} = {2 * c * h * w}, "
            f"got {conv.in_channels} -> {conv.out_channels}"
        )
    covariance = torch.zeros(c * h * w, c * h * w, dtype=torch.float64, device=images.device)
    count = 0
    for chunk in images.split(1000):  # in float64, a chunk at a time: 5,000 images hold 4.8M patches
        patches = chunk.double().unfold(2, h, 1).unfold(3, w, 1).permute(0, 2, 3, 1, 4, 5).reshape(-1, c * h * w)
        covariance += patches.T @ patches
        count += patches.shape[0]
    covariance /= count
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)  # ascending
    eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.T.flip(0)  # largest first, one per row
    scaled = (eigenvectors / torch.sqrt(eigenvalues.clamp(min=0) + eps)[:, None]).view(c * h * w, c, h, w)
    conv.weight.copy_(torch.cat((scaled, -scaled)).to(conv.weight.dtype))


def tta_logits(module: nn.Module, images: torch.Tensor, level: int, base: torch.Tensor | None = None) -> torch.Tensor:
    """The paper's test-time augmentation: level 1 averages the image and its mirror; level 2 averages that
    (weight 1/2) with the same for the image shifted by one pixel up-left and down-right (1/4 each)."""
    logits = module(images) if base is None else base
    if level == 0:
        return logits
    mirrored = 0.5 * logits + 0.5 * module(images.flip(-1))
    if level == 1:
        return mirrored
    height, width = images.shape[-2:]
    padded = F.pad(images, (1, 1, 1, 1), mode="reflect")
    shifted = [padded[..., :height, :width], padded[..., 2 : height + 2, 2 : width + 2]]
    translated = torch.stack([0.5 * module(x) + 0.5 * module(x.flip(-1)) for x in shifted]).mean(0)
    return 0.5 * mirrored + 0.5 * translated


class AirbenchClassifier(Classifier):
    """A `Classifier` with the paper's label smoothing in its loss and its test-time augmentation in
    `eval_forward`; `training_procedures` names what training must also do (freeze the whitening bias)."""

    def __init__(
        self,
        module: nn.Module,
        num_classes: int,
        *,
        whitening: nn.Conv2d,
        label_smoothing: float = 0.2,
        tta_level: int = 2,
        whiten_bias_fraction: float = 0.3,
    ):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"`label_smoothing` = {label_smoothing!r} must be in [0, 1)")
        if tta_level not in (0, 1, 2):
            raise ValueError(f"`tta_level` = {tta_level!r}: use 0 (none), 1 (mirror) or 2 (mirror and translate)")
        if not 0.0 <= whiten_bias_fraction <= 1.0:
            raise ValueError(f"`whiten_bias_fraction` = {whiten_bias_fraction!r} must be in [0, 1] (of the run)")
        loss = partial(soft_cross_entropy, label_smoothing=label_smoothing) if label_smoothing else soft_cross_entropy
        super().__init__(module, num_classes=num_classes, loss_fn=loss)
        self.label_smoothing = label_smoothing
        self.tta_level = tta_level
        self.whiten_bias_fraction = whiten_bias_fraction
        self._whitening = [whitening]  # a list: not registered twice as a submodule

    def eval_forward(self, batch: Any, outputs: Any | None = None) -> torch.Tensor:
        images, _ = batch
        return tta_logits(self.module, images, self.tta_level, outputs)

    def training_procedures(self) -> list[Algorithm]:
        return [FreezeWhiteningBias(self._whitening[0], self.whiten_bias_fraction)]


class FreezeWhiteningBias(Algorithm):
    """Trains the whitening layer's bias during the first `fraction` of the run, then freezes it (the paper:
    3 of 9.9 epochs). Part of the airbench model's training, not a speed-up method."""

    events = (Event.BATCH_START,)

    def __init__(self, whitening: nn.Conv2d, fraction: float):
        if whitening.bias is None:
            raise ValueError("the whitening conv has no bias to train")
        self.bias = whitening.bias
        self.fraction = fraction

    def match(self, event: Event, state: State) -> bool:
        return event is Event.BATCH_START

    def apply(self, event: Event, state: State, logger: Any) -> None:
        elapsed = state.get_elapsed_duration()
        train = elapsed is None or elapsed.value < self.fraction
        if self.bias.requires_grad != train:
            self.bias.requires_grad_(train)

    def effects(self) -> Effects:
        return Effects(writes={Resource.MODEL})

    def __repr__(self) -> str:
        return f"FreezeWhiteningBias(fraction={self.fraction})"


def build_airbench(
    *,
    num_classes: int,
    in_channels: int,
    normalize: nn.Module,
    init_images: torch.Tensor | None,
    widths: Sequence[int] = WIDTHS,
    bn_momentum: float = 0.6,
    scale: float = 1 / 9,
    label_smoothing: float = 0.2,
    tta_level: int = 2,
    whiten_bias_fraction: float = 0.3,
    whiten_images: int = 5000,
) -> AirbenchClassifier:
    """The model with its whitening layer fitted to the first `whiten_images` of `init_images` (uint8 or
    [0, 1] floats, as the loader holds them); without images the layer stays at its random start."""
    network = airbench_network(num_classes, in_channels, tuple(widths), bn_momentum, scale)
    whiten = cast(nn.Conv2d, network.whiten)  # Module.__getattr__ says Tensor | Module; airbench_network made a Conv2d
    if init_images is not None:
        whiten_from_images(whiten, normalize(init_images[:whiten_images].cpu()))  # uint8 or [0, 1]
    module = nn.Sequential(OrderedDict(normalize=normalize, net=network))
    return AirbenchClassifier(
        module,
        num_classes,
        whitening=whiten,
        label_smoothing=label_smoothing,
        tta_level=tta_level,
        whiten_bias_fraction=whiten_bias_fraction,
    )
