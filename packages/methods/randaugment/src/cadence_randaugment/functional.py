"""RandAugment (Cubuk et al., 2020): `depth` random image operations of strength `severity`.

`randaugment_image` is Composer's per-image function (PIL images and CHW tensors; a dataset
transform). `randaugment_batch` goes beyond it: it augments a whole NCHW batch on its device,
every sample drawing its own operations and magnitudes from a seedable generator, without a
per-sample loop or a host synchronisation. Both use the image operations of `cadence.ops`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cadence.ops.augment import (
    apply_plan,
    augment_batch,
    augment_image,
    draw_ops,
    each_sample,
    per_sample_on_cpu,
    plan_ops,
)
from cadence.ops.checks import check_int, check_number
from cadence.ops.image_ops import augmentation_sets, resolve_augmentation_set
from cadence.ops.pil import map_images, to_pixels

__all__ = ["RandAugmentTransform", "check_randaugment_args", "randaugment", "randaugment_batch", "randaugment_image"]


def check_randaugment_args(severity: Any, depth: Any, augmentation_set: Any) -> tuple[str, ...]:
    """Validate the hyperparameters; returns the op names of `augmentation_set`."""
    check_number("severity", severity, ge=1, le=10, hint="9 is the default")
    check_int("depth", depth, ge=1, hint="the number of operations applied to each image")
    return resolve_augmentation_set(augmentation_set)


def randaugment_image(
    img: Any,
    severity: float = 9,
    depth: int = 2,
    augmentation_set: str | Sequence[str] = augmentation_sets["all"],
    *,
    generator: torch.Generator | None = None,
) -> Any:
    """Apply `depth` operations, each drawn uniformly from `augmentation_set`, to one image.

    Args:
        img: a PIL image ('L' or 'RGB') or a CHW tensor (an NCHW tensor is augmented image by image):
            uint8, or float in [0, 1]. Normalised floats (as Composer accepts them) are augmented in
            each image's own [min, max], taken as black to white; augmenting before normalising keeps
            the operations' meaning exact.
        severity: strength of every operation, 1 (mild) to 10 (strongest); M in the paper. Each
            operation draws its magnitude at random up to this level, as Composer does.
        depth: number of operations applied in a row; N in the paper.
        augmentation_set: 'all', 'safe' (no operation that overlaps an ImageNet-C corruption) or
            'original' (see `cadence.ops.augmentation_sets`), or a sequence of op names.
        generator: the source of randomness; torch's default RNG when None, which DataLoader
            workers seed differently per worker.

    Returns:
        The augmented image, of the input's type, dtype and shape.
    """
    ops = check_randaugment_args(severity, depth, augmentation_set)
    if isinstance(img, torch.Tensor) and img.ndim == 4:
        return map_images(lambda i: randaugment_image(i, severity, depth, ops, generator=generator), img)
    pixels, restore, eight_bit = to_pixels(img, single=True, any_range=True)
    return restore(augment_image(pixels, ops, severity, depth, generator, quantize=eight_bit))


def randaugment_batch(
    images: torch.Tensor,
    severity: float = 9,
    depth: int = 2,
    augmentation_set: str | Sequence[str] = "all",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`randaugment_image` on every image of an NCHW batch at once, on the batch's device.

    Each sample draws its own operations and magnitudes (from `generator`, on its device), so the
    result has the distribution of a per-image loop, at the cost of a few passes over the batch
    per step. Keeps dtype (uint8, or float: in [0, 1], or normalised, then augmented in each image's
    own range as `randaugment_image`), device and memory format.
    """
    ops = check_randaugment_args(severity, depth, augmentation_set)
    if per_sample_on_cpu(images):  # large images on CPU: the same draws, then each image's pipeline alone
        n, _, h, w = images.shape
        groups, magnitudes, matrices = plan_ops(
            *draw_ops(n, ops, severity, depth, (h, w), generator, images.device), h, w
        )

        def one(j: int, image: torch.Tensor) -> torch.Tensor:
            pixels, restore, eight_bit = to_pixels(image, any_range=True)
            columns = (groups[:, j : j + 1], magnitudes[:, j : j + 1], matrices[:, j : j + 1])
            return restore(apply_plan(pixels, columns, quantize=eight_bit))

        return each_sample(one, images)
    pixels, restore, eight_bit = to_pixels(images, any_range=True)
    # the result is consumed at once by restore: it may sit in a reused buffer (no page faults on CPU)
    return restore(augment_batch(pixels, ops, severity, depth, generator, quantize=eight_bit, transient=True))


class RandAugmentTransform(torch.nn.Module):
    """`randaugment_image` as a transform, e.g. ``torchvision.transforms.Compose([RandAugmentTransform(), ...])``."""

    def __init__(self, severity: float = 9, depth: int = 2, augmentation_set: str | Sequence[str] = "all"):
        super().__init__()
        self.ops = check_randaugment_args(severity, depth, augmentation_set)
        self.severity, self.depth, self.augmentation_set = severity, depth, augmentation_set

    def forward(self, img: Any) -> Any:
        return randaugment_image(img, self.severity, self.depth, self.ops)

    def extra_repr(self) -> str:
        return f"severity={self.severity}, depth={self.depth}, augmentation_set={self.augmentation_set!r}"


def randaugment(
    severity: float = 9, depth: int = 2, augmentation_set: str | Sequence[str] = "all"
) -> RandAugmentTransform:
    """A `RandAugmentTransform` for a dataset's transforms (PIL images or CHW tensors)."""
    return RandAugmentTransform(severity, depth, augmentation_set)
