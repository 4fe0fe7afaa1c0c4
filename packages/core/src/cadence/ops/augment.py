"""Drawing random image operations per sample and applying them to a batch (RandAugment, AugMix).

Every sample of a batch gets its own operation and magnitude at every step (`draw_ops`), and
`apply_ops` runs the steps in one of two ways with the same result. Dense (for accelerators):
every primitive runs on the whole batch, each sample getting identity parameters for the
operations it did not draw; no per-sample Python loop, and nothing reads a device value on the
host, so it never synchronises. Grouped (for CPU, where reading a value costs nothing): samples
are sorted by operation and each primitive runs on its own samples only, a fraction of the dense
path's work. `augment_image` is the per-image reference: only the drawn primitive runs. Torch only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cadence.ops.image_ops import (
    GROUP_OF_OP,
    OPS,
    PRIMITIVE_ORDER,
    PRIMITIVES,
    affine_matrix,
    apply_op_parameters,
    op_magnitudes,
    primitive_parameters,
)
from cadence.ops.pixels import device_constant

__all__ = ["apply_ops", "augment_batch", "augment_image", "draw_ops", "random_uniform"]


def _apply_grouped(images: torch.Tensor, op_ids: torch.Tensor, values: torch.Tensor, quantize: bool) -> torch.Tensor:
    """`apply_ops` with each primitive run on its own samples only. Writes into `images`. Reads the
    group sizes on the host, so it is free of synchronisation only on CPU."""
    steps, n = op_ids.shape
    _, _, h, w = images.shape
    width = len(GROUP_OF_OP)
    matrices = affine_matrix(op_ids.flatten(), values.flatten(), h, w).view(steps, n, 2, 3)
    groups = device_constant(GROUP_OF_OP, torch.long, op_ids.device)[op_ids]
    order = torch.argsort(groups, dim=1, stable=True)
    offsets = torch.arange(steps, device=groups.device).view(-1, 1) * width
    sizes = torch.bincount((groups + offsets).flatten(), minlength=steps * width).view(steps, width).tolist()
    for step in range(steps):
        start = 0
        for key, size in zip(PRIMITIVE_ORDER, sizes[step]):  # the last group (no op) stays as it is
            if size:
                members = order[step, start : start + size]
                value = (matrices if key == "affine" else values)[step].index_select(0, members)
                changed = PRIMITIVES[key](images.index_select(0, members), value)
                images.index_copy_(0, members, changed.round_() if quantize else changed)
                start += size
    return images


def _draw_device(generator: torch.Generator | None, device: torch.device) -> torch.device:
    return generator.device if generator is not None else device


def random_uniform(shape: Sequence[int], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Uniforms drawn on the generator's device (the default RNG's when None), moved to `device`."""
    return torch.rand(tuple(shape), generator=generator, device=_draw_device(generator, device)).to(device)


_CPU_BLOCK_BYTES = 1 << 20  # about a core's L2 cache


def draw_ops(
    n: int,
    ops: Sequence[str],
    severity: float,
    steps: int,
    size: tuple[int, int],
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ops for `n` samples: (steps, n) op ids into `OPS` and their (steps, n) magnitudes.

    Every sample draws its op uniformly from `ops` at every step. Draws happen on the generator's
    device (the default RNG's when None) and land on `device`. `size` is the images' (H, W).
    """
    device = torch.device(device)
    choice = torch.randint(len(ops), (steps, n), generator=generator, device=_draw_device(generator, device))
    uniforms = random_uniform((steps, n, 4), generator, device)
    op_ids = device_constant(tuple(OPS.index(op) for op in ops), torch.long, device)[choice.to(device)]
    return op_ids, op_magnitudes(op_ids.flatten(), uniforms.flatten(0, 1), severity, *size).view(steps, n)


def apply_ops(
    images: torch.Tensor,
    op_ids: torch.Tensor,
    values: torch.Tensor,
    ops: Sequence[str],
    *,
    quantize: bool = False,
    grouped: bool | None = None,
) -> torch.Tensor:
    """Apply (steps, N) ops (`draw_ops`; op id -1 = none) to (N, C, H, W) pixels, step by step.

    Args:
        images: float pixels in [0, 255] (not modified).
        op_ids, values: each sample's op and magnitude at each step.
        ops: every op that may occur (the primitives the dense path runs).
        quantize: round to 8-bit levels after each step (uint8 data: PIL works in 8 bits).
        grouped: how a step runs. Dense (False): every primitive runs on the whole batch with identity
            parameters for the samples that drew another op, so nothing depends on the data's
            values: no host synchronisation on an accelerator. Grouped (True): samples are sorted by
            primitive and each primitive runs on its own samples only, which reads the group sizes on
            the host, so it is free only on CPU. Default: grouped on CPU, dense elsewhere. Both give
            the same result.
    """
    n, _, h, w = images.shape
    if images.device.type == "cpu" if grouped is None else grouped:
        # In cache-sized blocks of samples: a whole large batch streams through memory at every
        # primitive, while a block stays in cache (each sample's ops are its own, so the result
        # is the same).
        block = max(1, _CPU_BLOCK_BYTES // max(1, images[0].numel() * images.element_size()))
        if n <= block:
            return _apply_grouped(images.clone(), op_ids, values, quantize)
        parts = [
            _apply_grouped(images[i : i + block].clone(), op_ids[:, i : i + block], values[:, i : i + block], quantize)
            for i in range(0, n, block)
        ]
        return torch.cat(parts)
    for step in range(op_ids.shape[0]):
        images = apply_op_parameters(images, primitive_parameters(op_ids[step], values[step], h, w, ops))
        images = images.round() if quantize else images
    return images


def augment_batch(
    images: torch.Tensor,
    ops: Sequence[str],
    severity: float,
    steps: int,
    generator: torch.Generator | None = None,
    *,
    quantize: bool = False,
    grouped: bool | None = None,
) -> torch.Tensor:
    """`steps` random ops per sample of (N, C, H, W) pixels: `draw_ops`, then `apply_ops`."""
    n, _, h, w = images.shape
    op_ids, values = draw_ops(n, ops, severity, steps, (h, w), generator, images.device)
    return apply_ops(images, op_ids, values, ops, quantize=quantize, grouped=grouped)


def augment_image(
    image: torch.Tensor,
    ops: Sequence[str],
    severity: float,
    steps: int,
    generator: torch.Generator | None = None,
    *,
    quantize: bool = False,
) -> torch.Tensor:
    """The per-image reference of `augment_batch`: (1, C, H, W), only the drawn primitive runs."""
    _, _, h, w = image.shape
    for _ in range(steps):
        op = ops[int(torch.randint(len(ops), (1,), generator=generator, device=_draw_device(generator, image.device)))]
        uniforms = random_uniform((1, 4), generator, image.device)
        op_id = torch.full((1,), OPS.index(op), device=image.device)
        values = op_magnitudes(op_id, uniforms, severity, h, w)
        image = apply_op_parameters(image, primitive_parameters(op_id, values, h, w, (op,)))
        if quantize:
            image = image.round()
    return image
