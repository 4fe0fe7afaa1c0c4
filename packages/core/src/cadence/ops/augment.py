"""Drawing random image operations per sample and applying them to a batch (RandAugment, AugMix).

Every sample of a batch gets its own operation and magnitude at every step (`draw_ops`), and
`apply_ops` runs the steps in one of two ways with the same result. Dense (for accelerators):
every primitive runs on the whole batch, each sample getting identity parameters for the
operations it did not draw; no per-sample Python loop, and nothing reads a device value on the
host, so it never synchronises. Grouped (for CPU, where reading a value costs nothing): samples
are sorted by operation once per step and each primitive runs on its own contiguous slice only, a
fraction of the dense path's work. Large images on CPU (`per_sample_on_cpu`) run one by one instead,
conversion to the end (`plan_ops`, `apply_plan`, `each_sample`), so that an image stays in cache.
On CPU the grouped steps write into per-thread buffers kept between calls: a fresh batch-sized
tensor page-faults, which cost as much as the work itself. All give the same result.
`augment_image` is the per-image reference. Torch only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from cadence.ops.image_ops import (
    GROUP_OF_OP,
    GROUPED_PRIMITIVES,
    OPS,
    PRIMITIVE_ORDER,
    affine_matrix,
    apply_op_parameters,
    op_magnitudes,
    primitive_parameters,
)
from cadence.ops.pixels import IN_PLACE, device_constant

__all__ = [
    "apply_ops",
    "apply_plan",
    "augment_batch",
    "augment_image",
    "draw_ops",
    "each_sample",
    "per_sample_on_cpu",
    "plan_ops",
    "random_uniform",
]

# CPU strategy by size (measured on 2-core AMD EPYC, 1 thread): samples run in blocks of about this
# many bytes, each primitive on its own samples of the block (per-primitive dispatch costs are shared by
# the block, which stays in cache); images of at least _CPU_SAMPLE_BYTES run one by one instead
_CPU_BLOCK_BYTES = 4 << 20
_CPU_SAMPLE_BYTES = 64 << 10


# Groups of the CPU path: one per primitive, then samples whose parameter changes nothing (rounded
# only, as the primitive's output would be), then samples without an op at this step.
_IDENTITY_GROUP = len(PRIMITIVE_ORDER)
_NO_OP_GROUP = _IDENTITY_GROUP + 1
_GROUP_OF_OP = (*GROUP_OF_OP[:-1], _NO_OP_GROUP)
_UNCHANGING = {"affine": None, "autocontrast": 0.0, "equalize": 0.0}  # parameter values that change nothing


def _cpu_groups(op_ids: torch.Tensor, values: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """(steps, N) group of each sample at each step; samples with identity parameters (a rotation by 0
    degrees, say) go to `_IDENTITY_GROUP`, so that every member of a primitive's group changes."""
    groups = device_constant(_GROUP_OF_OP, torch.long, op_ids.device)[op_ids]
    eye = device_constant(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)), matrices.dtype, matrices.device)
    unchanged = (groups == PRIMITIVE_ORDER.index("affine")) & (matrices == eye).flatten(2).all(dim=2)
    for key, value in _UNCHANGING.items():
        if value is not None:
            unchanged |= (groups == PRIMITIVE_ORDER.index(key)) & (values == value)
    unchanged |= (groups == PRIMITIVE_ORDER.index("posterize")) & (values >= 8)
    return groups.masked_fill_(unchanged, _IDENTITY_GROUP)


_BUFFERS = threading.local()


def _work_buffers(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Three work buffers (the steps take the first two in turn; the third takes a transient result),
    on CPU kept per thread for the next call of the same shape: a fresh block-sized tensor costs page
    faults on CPU, about as much as the step's copy. Elsewhere (grouped forced on) fresh ones."""
    if device.type != "cpu":
        return tuple(torch.empty(shape, dtype=dtype, device=device) for _ in range(3))
    cached = getattr(_BUFFERS, "buffers", None)
    if cached is None or cached[0].shape != shape or cached[0].dtype != dtype:
        cached = _BUFFERS.buffers = tuple(torch.empty(shape, dtype=dtype) for _ in range(3))
    return cached


def _apply_sorted(
    images: torch.Tensor,
    rows: torch.Tensor,
    groups: torch.Tensor,
    values: torch.Tensor,
    matrices: torch.Tensor,
    quantize: bool,
    transient: bool = False,
) -> torch.Tensor:
    """The steps of the samples ``images[rows]`` on CPU, each primitive on its own samples only.

    At every step the samples are gathered once in the order of their groups, so that each group is
    a contiguous slice that its primitive reads and overwrites in place: one copy of the block per
    step instead of a gather and a scatter per primitive. Reads the group sizes on the host (free on
    CPU). Returns the samples in the order of `rows` (in a work buffer if `transient`).
    """
    steps, k = groups.shape
    order = torch.argsort(groups, dim=1, stable=True)
    offsets = torch.arange(steps, device=groups.device).view(-1, 1) * (_NO_OP_GROUP + 1)
    sizes = torch.bincount((groups + offsets).flatten(), minlength=steps * (_NO_OP_GROUP + 1)).view(steps, -1)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(k, device=order.device).expand(steps, k))
    # where each step reads its sorted samples: the input rows, then the previous step's positions
    sources = [rows[order[0]], *rank[:-1].gather(1, order[1:])]
    values = values.gather(1, order)
    matrices = matrices.gather(1, order.view(steps, k, 1, 1).expand(-1, -1, 2, 3))
    buffers = _work_buffers((k, *images.shape[1:]), images.dtype, images.device)
    work = images
    for step, step_sizes in enumerate(sizes.tolist()):
        work = torch.index_select(work, 0, sources[step], out=buffers[step % 2])
        start = 0
        for key, size in zip(PRIMITIVE_ORDER, step_sizes):
            if size:
                param = (matrices if key == "affine" else values)[step, start : start + size]
                IN_PLACE[key](work[start : start + size], param)
                start += size
        if quantize and start + step_sizes[_IDENTITY_GROUP]:
            work[: start + step_sizes[_IDENTITY_GROUP]].round_()
    return torch.index_select(work, 0, rank[-1], out=buffers[2]) if transient else work.index_select(0, rank[-1])


def _apply_each(
    images: torch.Tensor, groups: torch.Tensor, values: torch.Tensor, matrices: torch.Tensor, quantize: bool
) -> torch.Tensor:
    """The steps of each sample in turn (sample j reads ``images[j % N]``). For large images: a sample
    fills the cache by itself, and only its own primitive runs, on it alone, with no gather or copy."""
    n = images.shape[0]
    out = images.new_empty((groups.shape[1], *images.shape[1:]))
    for j, sample_groups in enumerate(groups.T.tolist()):
        image = images[j % n : j % n + 1]
        for step, group in enumerate(sample_groups):
            if group < _IDENTITY_GROUP:
                key = PRIMITIVE_ORDER[group]
                image = GROUPED_PRIMITIVES[key](image, (matrices if key == "affine" else values)[step, j : j + 1])
                image = image.round_() if quantize else image
            elif group == _IDENTITY_GROUP and quantize:
                image = image.round()
        out[j : j + 1] = image
    return out


def plan_ops(
    op_ids: torch.Tensor, values: torch.Tensor, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CPU path's (steps, N) groups, (steps, N) magnitudes and (steps, N, 2, 3) affine matrices of
    (steps, N) ops, computed once for a batch that `apply_plan` then runs sample by sample."""
    steps, total = op_ids.shape
    matrices = affine_matrix(op_ids.flatten(), values.flatten(), height, width).view(steps, total, 2, 3)
    return _cpu_groups(op_ids, values, matrices), values, matrices


def apply_plan(
    image: torch.Tensor, plan: tuple[torch.Tensor, torch.Tensor, torch.Tensor], *, quantize: bool = False
) -> torch.Tensor:
    """`apply_ops` on CPU for the columns of a `plan_ops` plan (sliced by the caller), each reading
    ``image[j % N]``: the per-sample strategy for large images, without re-planning per sample."""
    return _apply_each(image, *plan, quantize)


def _apply_cpu(
    images: torch.Tensor, op_ids: torch.Tensor, values: torch.Tensor, quantize: bool, copies: int, transient: bool
) -> torch.Tensor:
    """`apply_ops` on CPU, in cache-sized blocks of samples: a whole large batch would stream through
    memory at every primitive, while a block stays in cache (each sample's ops are its own, so the
    result is the same). Blocks of one sample (large images) run sample by sample."""
    n, _, h, w = images.shape
    steps, total = op_ids.shape
    if steps == 0 or total == 0:
        return images.repeat(copies, 1, 1, 1)
    groups, values, matrices = plan_ops(op_ids, values, h, w)
    sample_bytes = max(1, images[0].numel() * images.element_size())
    if sample_bytes >= _CPU_SAMPLE_BYTES:
        return _apply_each(images, groups, values, matrices, quantize)
    block = max(1, _CPU_BLOCK_BYTES // sample_bytes)
    rows = torch.arange(total, device=images.device) % n
    if total <= block:
        return _apply_sorted(images, rows, groups, values, matrices, quantize, transient)
    parts = []
    for start in range(0, total, block):
        cols = slice(start, start + block)
        parts.append(_apply_sorted(images, rows[cols], groups[:, cols], values[:, cols], matrices[:, cols], quantize))
    return torch.cat(parts)


def _draw_device(generator: torch.Generator | None, device: torch.device) -> torch.device:
    return generator.device if generator is not None else device


def random_uniform(shape: Sequence[int], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Uniforms drawn on the generator's device (the default RNG's when None), moved to `device`."""
    return torch.rand(tuple(shape), generator=generator, device=_draw_device(generator, device)).to(device)


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
    copies: int = 1,
    transient: bool = False,
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
        copies: the ops cover `copies` copies of the batch, copy-major ((steps, copies * N) op ids:
            AugMix's chains), without materialising the copies on CPU. Returns copies * N samples.
        transient: the result may live in a per-thread buffer that the next call overwrites (no fresh
            batch-sized tensor, which page-faults on CPU): for callers that consume it at once.
    """
    n, _, h, w = images.shape
    if copies < 1 or op_ids.shape[-1] != copies * n:
        raise ValueError(f"`op_ids` must have copies * N = {copies} * {n} columns, got shape {tuple(op_ids.shape)}")
    if images.device.type == "cpu" if grouped is None else grouped:
        return _apply_cpu(images, op_ids, values, quantize, copies, transient)
    images = images.repeat(copies, 1, 1, 1) if copies > 1 else images
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
    transient: bool = False,
) -> torch.Tensor:
    """`steps` random ops per sample of (N, C, H, W) pixels: `draw_ops`, then `apply_ops`."""
    n, _, h, w = images.shape
    op_ids, values = draw_ops(n, ops, severity, steps, (h, w), generator, images.device)
    return apply_ops(images, op_ids, values, ops, quantize=quantize, grouped=grouped, transient=transient)


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


def per_sample_on_cpu(images: torch.Tensor) -> bool:
    """Whether a batch augments fastest one sample at a time: on CPU, with images so large (224² RGB
    and up) that a batch-wide pass (the float conversion, each step, the 8-bit rounding) streams
    through memory, while one image's whole pipeline stays in cache. Same result either way."""
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.device.type != "cpu" or not len(images):
        return False
    if images.dtype != torch.uint8 and not images.is_floating_point():
        return False  # refused by the batched path, with its error
    return images[0].numel() * max(4, images.element_size()) >= _CPU_SAMPLE_BYTES


def each_sample(function: Callable[[int, torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """``function(j, images[j : j + 1])`` for every sample j, into one batch of the input's dtype and
    memory format (the strategy `per_sample_on_cpu` chooses; a Python loop over samples only there)."""
    channels_last = images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    out = torch.empty(images.shape, dtype=images.dtype, device=images.device)
    out = out.contiguous(memory_format=torch.channels_last) if channels_last else out
    for j in range(images.shape[0]):
        out[j : j + 1] = function(j, images[j : j + 1])
    return out
