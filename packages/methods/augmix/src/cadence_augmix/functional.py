"""AugMix (Hendrycks et al., 2020): mix an image with `width` chains of random operations.

Each chain applies `depth` operations (1 to 3 at random when ``depth=-1``); the chains are
mixed with Dirichlet(alpha) weights, and the mixture with the original image with a
Beta(alpha, alpha) weight: ``(1 - m) x + m sum_i w_i chain_i(x)``. `augmix_image` is Composer's
per-image function (PIL images and CHW tensors); `augmix_batch` does a whole NCHW batch on its
device with per-sample chains, weights and operations and no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cadence.ops.augment import apply_ops, apply_plan, augment_image, draw_ops, each_sample, per_sample_on_cpu, plan_ops
from cadence.ops.checks import check_int, check_number
from cadence.ops.image_ops import augmentation_sets, resolve_augmentation_set
from cadence.ops.pil import map_images, to_pixels
from cadence.ops.sampling import sample_beta, sample_dirichlet

__all__ = ["AugmentAndMixTransform", "augmix", "augmix_batch", "augmix_image", "check_augmix_args"]

_MAX_DEPTH = 3  # depth=-1 draws each chain's depth uniformly from 1..3


def check_augmix_args(severity: Any, depth: Any, width: Any, alpha: Any, augmentation_set: Any) -> tuple[str, ...]:
    """Validate the hyperparameters; returns the op names of `augmentation_set`."""
    check_number("severity", severity, ge=1, le=10, hint="3 is the default")
    if check_int("depth", depth) != -1 and depth < 1:
        raise ValueError(f"`depth`={depth!r} must be >= 1, or -1 for a random depth of 1 to 3 per chain")
    check_int("width", width, ge=1, hint="the number of augmentation chains mixed")
    check_number("alpha", alpha, gt=0, hint="the Dirichlet and Beta concentration")
    return resolve_augmentation_set(augmentation_set)


def _mix_weights(
    n: int, width: int, alpha: float, generator: torch.Generator | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(width, N) chain weights w ~ Dirichlet(alpha) and (N,) mixture weights m ~ Beta(alpha, alpha)."""
    draw = generator.device if generator is not None else device
    concentration = torch.full((n, width), float(alpha), device=draw)
    weights = sample_dirichlet(concentration, generator).to(device).T
    return weights, sample_beta(concentration[:, 0], concentration[:, 0], generator).to(device)


def _combine(
    original: torch.Tensor, chains: list[torch.Tensor], weights: torch.Tensor, skip: torch.Tensor
) -> torch.Tensor:
    """``(1 - m) x + m sum_i w_i chain_i``, per sample. Consumes its inputs: computes in place in
    `original` and the first chain (fresh batch-sized tensors page-fault on CPU), with the same
    arithmetic as out of place."""
    weights = weights.to(original.dtype).reshape(len(chains), -1, 1, 1, 1)
    mixed = chains[0].mul_(weights[0])
    for chain, weight in zip(chains[1:], weights[1:]):
        mixed = mixed.addcmul_(chain, weight)
    skip = skip.to(original.dtype).view(-1, 1, 1, 1)
    return torch.addcmul(original.mul_(1 - skip), mixed, skip, out=mixed)


def _mix(
    original: torch.Tensor, chains: list[torch.Tensor], alpha: float, generator: torch.Generator | None
) -> torch.Tensor:
    """``(1 - m) x + m sum_i w_i chain_i`` with w ~ Dirichlet(alpha) and m ~ Beta(alpha, alpha) per sample."""
    return _combine(original, chains, *_mix_weights(original.shape[0], len(chains), alpha, generator, original.device))


def augmix_image(
    img: Any,
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[str] = augmentation_sets["all"],
    *,
    generator: torch.Generator | None = None,
) -> Any:
    """AugMix one image.

    Args:
        img: a PIL image ('L' or 'RGB') or a CHW tensor (an NCHW tensor is augmented image by image):
            uint8, or float in [0, 1]. Normalised floats (as Composer accepts them) are augmented in
            each image's own [min, max], taken as black to white; augmenting before normalising keeps
            the operations' meaning exact.
        severity: strength of every operation, 1 (mild) to 10 (strongest); each draws its magnitude
            at random up to this level, as in Composer.
        depth: operations per chain; -1 draws 1, 2 or 3 for each chain.
        width: number of chains mixed.
        alpha: concentration of the Dirichlet chain weights and of the Beta(alpha, alpha) weight of
            the mixture against the original image. Small values put almost all weight on one
            chain, and on either the original or the mixture; large ones mix evenly.
        augmentation_set: 'all', 'safe' (no operation that overlaps an ImageNet-C corruption, as in
            the paper) or 'original' (see `cadence.augmentations.augmentation_sets`), or op names.
        generator: the source of randomness; torch's default RNG when None, which DataLoader
            workers seed differently per worker.

    Returns:
        The augmented image, of the input's type, dtype and shape.
    """
    ops = check_augmix_args(severity, depth, width, alpha, augmentation_set)
    if isinstance(img, torch.Tensor) and img.ndim == 4:
        return map_images(lambda i: augmix_image(i, severity, depth, width, alpha, ops, generator=generator), img)
    pixels, restore, eight_bit = to_pixels(img, single=True, any_range=True)
    draw = generator.device if generator is not None else pixels.device
    chains = []
    for _ in range(width):
        steps = depth if depth > 0 else int(torch.randint(1, _MAX_DEPTH + 1, (1,), generator=generator, device=draw))
        chains.append(augment_image(pixels, ops, severity, steps, generator, quantize=eight_bit))
    return restore(_mix(pixels, chains, alpha, generator))


def augmix_batch(
    images: torch.Tensor,
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[str] = "all",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`augmix_image` on every image of an NCHW batch at once, on the batch's device.

    The ``width`` chains of all samples run as one batch of ``width * N`` images; with ``depth=-1``
    every chain runs 3 steps and the steps beyond each chain's drawn depth do nothing. Chains, weights
    and operations are drawn per sample from `generator`, on its device. Keeps dtype (uint8, or float:
    in [0, 1], or normalised, then augmented in each image's own range as `augmix_image`), device and
    memory format.
    """
    ops = check_augmix_args(severity, depth, width, alpha, augmentation_set)
    if per_sample_on_cpu(images):  # large images on CPU: the same draws, then each image's pipeline alone
        n, _, h, w = images.shape
        groups, magnitudes, matrices = plan_ops(
            *_draw_chains(n, ops, severity, depth, width, (h, w), generator, images.device), h, w
        )
        weights, skip = _mix_weights(n, width, alpha, generator, images.device)

        def one(j: int, image: torch.Tensor) -> torch.Tensor:
            pixels, restore, eight_bit = to_pixels(image, any_range=True)
            columns = (groups[:, j::n], magnitudes[:, j::n], matrices[:, j::n])  # its width chains
            chains = apply_plan(pixels, columns, quantize=eight_bit)
            return restore(_combine(pixels, list(chains.chunk(width)), weights[:, j : j + 1], skip[j : j + 1]))

        return each_sample(one, images)
    pixels, restore, eight_bit = to_pixels(images, any_range=True)
    n, _, h, w = pixels.shape
    op_ids, values = _draw_chains(n, ops, severity, depth, width, (h, w), generator, pixels.device)
    # all chains as one batch of width * N images (on CPU without copying the batch width times)
    # consumed at once by the mixing: the chains may sit in a reused buffer (no page faults on CPU)
    chains = list(apply_ops(pixels, op_ids, values, ops, quantize=eight_bit, copies=width, transient=True).chunk(width))
    return restore(_mix(pixels, chains, alpha, generator))


def _draw_chains(
    n: int,
    ops: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    size: tuple[int, int],
    generator: torch.Generator | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(steps, width * N) op ids and magnitudes of every chain, chain-major; with ``depth=-1`` every
    chain has _MAX_DEPTH steps, and those beyond its drawn depth have no op (id -1)."""
    steps = _MAX_DEPTH if depth == -1 else depth
    op_ids, values = draw_ops(width * n, ops, severity, steps, size, generator, device)
    if depth == -1:
        draw = generator.device if generator is not None else device
        chain_depth = torch.randint(1, _MAX_DEPTH + 1, (width * n,), generator=generator, device=draw)
        active = torch.arange(_MAX_DEPTH, device=device).view(-1, 1) < chain_depth.to(device)
        op_ids = torch.where(active, op_ids, -1)
    return op_ids, values


class AugmentAndMixTransform(torch.nn.Module):
    """`augmix_image` as a transform, e.g. ``torchvision.transforms.Compose([AugmentAndMixTransform(), ...])``."""

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[str] = "all",
    ):
        super().__init__()
        self.ops = check_augmix_args(severity, depth, width, alpha, augmentation_set)
        self.severity, self.depth, self.width, self.alpha = severity, depth, width, alpha
        self.augmentation_set = augmentation_set

    def forward(self, img: Any) -> Any:
        return augmix_image(img, self.severity, self.depth, self.width, self.alpha, self.ops)

    def extra_repr(self) -> str:
        return (
            f"severity={self.severity}, depth={self.depth}, width={self.width}, alpha={self.alpha}, "
            f"augmentation_set={self.augmentation_set!r}"
        )


def augmix(
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[str] = "all",
) -> AugmentAndMixTransform:
    """An `AugmentAndMixTransform` for a dataset's transforms (PIL images or CHW tensors)."""
    return AugmentAndMixTransform(severity, depth, width, alpha, augmentation_set)
