"""Batches for training and evaluation.

`TensorLoader` keeps a whole dataset as tensors on the training device and slices batches
out of it, with flip and crop done on the batch on that device (the airbench way): no
worker processes, no per-sample Python, no host-to-device copies. ``loader = "dataloader"``
in a recipe uses a standard `torch.utils.data.DataLoader` with per-sample torchvision
transforms instead (which the trainer can resume exactly mid-epoch).

Image batches are ``(float images in [0, 1], int64 labels)``; text batches are dicts of
``input_ids``, ``attention_mask`` (and ``token_type_ids``) and ``labels``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = [
    "AlternatingFlipTranslate",
    "FlipCrop",
    "TensorLoader",
    "alternating_flip",
    "batch_crop",
    "batch_flip_lr",
    "image_dataloader",
    "make_augment",
]


def batch_flip_lr(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mirror a random half of the images left-right."""
    flip = torch.rand(images.shape[0], 1, 1, 1, device=images.device, generator=generator) < 0.5
    return torch.where(flip, images.flip(-1), images)


def _reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """The source position of each position of a reflect-padded axis (``-size < index < 2 * size - 1``)."""
    index = index.abs()
    return torch.where(index >= size, 2 * (size - 1) - index, index)


def batch_crop(images: torch.Tensor, padding: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random crops of the original size from reflect-padded images, one offset per image.

    One ``index_select`` copies every output row as a ``W``-wide window of the column-padded batch (rows
    are reflected through the row index), a few kernels and no host sync: per-pixel advanced indexing
    was about 10x slower on the CPU. Same random draws and same crops as padding then indexing.
    """
    n, c, h, w = images.shape
    if not isinstance(padding, int) or not 0 <= padding < min(h, w):
        raise ValueError(f"padding={padding!r} must be an int in [0, {min(h, w)}) for {h}x{w} images (reflect)")
    device = images.device
    dy = torch.randint(0, 2 * padding + 1, (n, 1), device=device, generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), device=device, generator=generator)
    left, right = images[..., 1 : padding + 1].flip(-1), images[..., w - padding - 1 : w - 1].flip(-1)
    padded = torch.cat([left, images, right], dim=-1).contiguous()  # (N, C, H, W + 2 * padding)
    width = w + 2 * padding
    rows = _reflect(dy + torch.arange(-padding, h - padding, device=device), h)  # (N, H) source rows
    planes = torch.arange(n * c, device=device).view(n, c, 1) * h  # first row of each (image, channel)
    starts = (planes + rows[:, None, :]) * width + dx[:, :, None]  # (N, C, H): where each output row starts
    windows = padded.view(-1).unfold(0, w, 1)  # every W-wide window of the flat batch, as a view
    return windows.index_select(0, starts.view(-1)).view(n, c, h, w)


def alternating_flip(images: torch.Tensor, index: torch.Tensor, epoch: int, seed: int) -> torch.Tensor:
    """airbench's flip: each sample's mirror bit is fixed by (seed, its index in the dataset), and every odd
    epoch mirrors the opposite set, so over two epochs each image is seen both ways. The bit is a hash of
    the index computed on the device (Knuth's multiplicative hash), so it costs no state and no host sync."""
    bits = ((index * 2654435761 + seed * 40503 + 12345) >> 15) & 1
    flip = (bits ^ (epoch % 2)).bool().view(-1, 1, 1, 1)
    return torch.where(flip, images.flip(-1), images)


class AlternatingFlipTranslate:
    """``augment = "alt_flip_translate"``: `alternating_flip`, then a random translation of up to `padding`
    pixels (a reflect-padded random crop; airbench: 2 pixels at 32 px). Needs each sample's dataset index.

    `TensorLoader` calls `gather`, which makes the same batch (the same draws, the same pixels) in one copy
    from `FlipCrop`'s padded and mirrored dataset: each sample's mirror bit is a function of its index and the
    epoch's parity, so which source image a sample reads is looked up in a table built once per parity. A
    batch then costs about ten small kernels instead of forty (`benchmarks.step_ops`): on a GPU whose step is
    host-bound, each kernel launch is host time.
    """

    positional = True  # TensorLoader passes index and epoch

    def __init__(self, padding: int, seed: int):
        self.padding, self.seed = padding, seed
        self._windows = FlipCrop(padding)
        self._sources: tuple[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None, *, index: torch.Tensor, epoch: int
    ) -> torch.Tensor:
        return batch_crop(alternating_flip(images, index, epoch, self.seed), self.padding, generator)

    def gather(
        self, images: torch.Tensor, index: torch.Tensor, generator: torch.Generator | None, *, epoch: int
    ) -> torch.Tensor:
        """``self(images[index], generator, index=index, epoch=epoch)`` for a dataset of `images`, in one copy."""
        return self._windows.select(images, self._source_table(images, epoch % 2).index_select(0, index), generator)

    def _source_table(self, images: torch.Tensor, parity: int) -> torch.Tensor:
        """For every sample of the dataset, the source image it reads in an epoch of this parity: itself, or its
        mirrored copy (which `FlipCrop.select` places `len(images)` further on)."""
        key = (images.data_ptr(), tuple(images.shape), images.device, self.seed)
        if self._sources is None or self._sources[0] != key:
            count = images.shape[0]
            every = torch.arange(count, device=images.device)
            bits = ((every * 2654435761 + self.seed * 40503 + 12345) >> 15) & 1  # `alternating_flip`'s hash
            self._sources = (key, (every + bits * count, every + (bits ^ 1) * count))
        return self._sources[1][parity]


def make_augment(kind: str, image_size: int, seed: int = 0) -> Callable[..., torch.Tensor] | None:
    """The batch augmentation for `kind` (``none``, ``flip``, ``flip_crop``, ``alt_flip_translate``); crop padding
    is 1/8 of the side, translation 1/16."""
    if kind == "none":
        return None
    if kind == "alt_flip_translate":
        return AlternatingFlipTranslate(max(1, image_size // 16), seed)
    return FlipCrop(max(1, image_size // 8) if kind == "flip_crop" else 0)


class FlipCrop:
    """``flip`` (`padding` 0) and ``flip_crop``: `batch_flip_lr`, then `batch_crop` unless `padding` is 0.

    Called on a batch, it does just that. `TensorLoader` calls `gather` instead, which makes the same
    batch (the same random draws, the same pixels) from the dataset in one copy: it keeps the dataset
    column-padded and mirrored once (2 x (W + 2 * padding) / W times the images' memory, on their device)
    and selects each output row as a window of it, so the per-batch work is one ``index_select`` instead of
    a gather, a flip, a ``where``, a pad and a crop, each a pass over the batch.
    """

    def __init__(self, padding: int):
        self.padding = padding
        self._source: tuple[tuple[Any, ...], tuple[torch.Tensor, ...]] | None = None

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        images = batch_flip_lr(images, generator)
        return batch_crop(images, self.padding, generator) if self.padding else images

    def _prepared(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every W-wide window of the padded and mirrored dataset (a view), and the offsets of a window's
        start: of each (crop offset, output row), of each channel, of a sample."""
        key = (images.data_ptr(), tuple(images.shape), images.dtype, images.device)
        if self._source is None or self._source[0] != key:
            _, c, h, w = images.shape
            p, device = self.padding, images.device
            if not 0 <= p < min(h, w):
                raise ValueError(f"padding={p} must be below the image side for {h}x{w} images (reflect)")
            padded = torch.cat([images[..., 1 : p + 1].flip(-1), images, images[..., w - p - 1 : w - 1].flip(-1)], -1)
            source = torch.cat([padded, padded.flip(-1)]).contiguous()  # mirrored images follow the originals
            width = w + 2 * p
            offsets = torch.arange(2 * p + 1, device=device)[:, None]
            rows = _reflect(offsets + torch.arange(-p, h - p, device=device), h) * width  # (offsets, H)
            channels = torch.arange(c, device=device)[:, None] * (h * width)  # (C, 1)
            self._source = (key, (source.view(-1).unfold(0, w, 1), rows, channels))
        return self._source[1]

    def gather(self, images: torch.Tensor, index: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """``self(images[index], generator)`` for a dataset of `images` (N, C, H, W), in one copy (and a dozen
        small kernels, no host sync)."""
        flip = torch.rand(len(index), 1, 1, 1, device=images.device, generator=generator) < 0.5  # as batch_flip_lr
        return self.select(images, index + flip.view(-1) * images.shape[0], generator)

    def select(self, images: torch.Tensor, source: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Random crops (as `batch_crop` draws them) of source images `source`: sample ``i`` of `images` is
        source ``i``, its mirror image is source ``i + len(images)``."""
        windows, rows, channels = self._prepared(images)
        n, (_, c, h, w) = len(source), images.shape
        device, p = images.device, self.padding
        starts = (source * (c * h * (w + 2 * p)))[:, None, None] + channels  # (n, C, 1)
        if p:
            dy = torch.randint(0, 2 * p + 1, (n,), device=device, generator=generator)
            dx = torch.randint(0, 2 * p + 1, (n, 1, 1), device=device, generator=generator)
            starts = starts + (rows.index_select(0, dy)[:, None, :] + dx)  # (n, C, H)
        else:
            starts = starts + rows[0]
        return windows.index_select(0, starts.view(-1)).view(n, c, h, w)


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`; to a GPU through pinned memory, asynchronously (a pageable copy waits)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class TensorLoader:
    """Shuffled batches sliced from tensors that already live on the device.

    Args:
        tensors: equal-length tensors; images (uint8 or float) come first when `images` is True.
        batch_size, shuffle, drop_last: as in `DataLoader`.
        seed: epoch ``e`` uses the permutation of ``seed + e``, so runs repeat exactly.
        augment: ``augment(images, generator)`` applied to each image batch on its device; one whose ``positional``
            is True also takes each sample's dataset ``index`` and the ``epoch`` (`AlternatingFlipTranslate`).
        keys: when given, batches are dicts with these keys (text); else tuples.
        lengths: per-sample token counts (on the CPU); text batches are trimmed to their longest
            sample, read from this host copy so trimming costs no device synchronisation.
        channels_last: hand image batches to the model in channels_last memory format.
        rank, world_size: with ``world_size`` > 1 (torchrun), this process's share of every batch: each
            batch of `batch_size` is cut from the same order on every rank, and rank ``r`` yields its
            ``r``-th of ``world_size`` near-equal contiguous parts (`batch_size / world_size` samples of
            a full batch), so the ranks together see each batch once; augmentations draw per rank.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool = False,
        seed: int = 0,
        augment: Callable[..., torch.Tensor] | None = None,  # as `make_augment` returns
        keys: tuple[str, ...] | None = None,
        lengths: torch.Tensor | None = None,
        channels_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ):
        sizes = {t.shape[0] for t in tensors}
        if len(sizes) != 1:
            raise ValueError(f"tensors must share their first dimension, got sizes {sorted(sizes)}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
        self.tensors = tensors
        self.num_samples = sizes.pop()
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last and self.num_samples >= batch_size
        self.seed = seed
        self.augment = augment
        self.keys = keys
        self.lengths = lengths
        self.channels_last = channels_last
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
            raise ValueError(f"rank={rank!r}, world_size={world_size!r}: need ints with 0 <= rank < world_size")
        self.rank, self.world_size = rank, world_size
        self._drop_last_asked = drop_last
        if not self.shares_for(world_size):
            raise ValueError(
                f"{self.num_samples} samples cannot give each of {world_size} ranks a share of every batch of "
                f"{batch_size}: every rank must step (and evaluate) as often; use more samples or fewer processes"
            )
        self.epoch = 0
        self._epoch_now = 0  # the epoch being yielded (`epoch` already counts it once it started)
        self.device = tensors[0].device
        self._generator = torch.Generator(device=self.device)

    def shares_for(self, world_size: int) -> bool:
        """Whether `world_size` ranks can each take a share of every batch: every rank must step (and evaluate) as
        often, so each needs a sample, and, when the last short batch is to be dropped, there must be a full
        batch (one process keeps its short batch instead). `scale_out.check_shares` asks it of one process's
        loaders before torchrun starts the ranks that would refuse."""
        asked_full = self._drop_last_asked and self.num_samples < self.batch_size
        return world_size == 1 or (self.num_samples >= world_size and not asked_full)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        short = self.num_samples % self.batch_size  # a short last batch: ranks past its size get no share of it
        return self.num_samples // self.batch_size + (short > self.rank if self.world_size > 1 else short > 0)

    def _order(self) -> torch.Tensor:
        """The epoch's sample order; without shuffling the identity, so `_batch` reads each image batch as a view
        of its rows (a subclass with another order for images overrides `_batch` too)."""
        if not self.shuffle:
            return torch.arange(self.num_samples)
        return torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))

    def __iter__(self) -> Iterator[Any]:
        order = self._start_epoch()
        device_order = _to_device(order, self.device)  # one copy per epoch, which the host does not wait for
        self.epoch += 1
        same = device_order is order  # on the CPU: one slice serves as both
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            stop = min(start + self.batch_size, self.num_samples)
            if self.world_size > 1:
                start, stop = self._share(start, stop)
            index = order[start:stop]
            device_index = index if same else device_order[start:stop]
            yield self._batch(index, device_index, None if self.shuffle else (start, stop))

    def _share(self, start: int, stop: int) -> tuple[int, int]:
        """The positions of this rank's contiguous part of the batch at positions [start, stop) of the order."""
        size, extra = divmod(stop - start, self.world_size)  # the first `extra` ranks take one sample more
        first = start + self.rank * size + min(self.rank, extra)
        return first, first + size + (self.rank < extra)

    def _start_epoch(self) -> torch.Tensor:
        """The epoch's sample order; the augmentation generator restarts from the epoch's seed."""
        self._generator.manual_seed((self.seed * 7919 + self.epoch) * self.world_size + self.rank)
        self._epoch_now = self.epoch
        return self._order()

    def peek(self) -> Any:
        """The first batch the next epoch will yield, without advancing anything (for checks before training)."""
        start, stop = self._share(0, min(self.batch_size, self.num_samples))
        index = self._start_epoch()[start:stop]
        return self._batch(index, _to_device(index, self.device), None if self.shuffle else (start, stop))

    def _batch(self, index: torch.Tensor, device_index: torch.Tensor, rows: tuple[int, int] | None) -> Any:
        """The batch of samples `index` (host copy, for lengths) / `device_index` (the same on the device); `rows`,
        without shuffling, the positions [start, stop) they are (read as a view, no element read back)."""
        if self.keys is not None:
            items = [t.index_select(0, device_index) for t in self.tensors]  # a row copy: t[index] is ~30x slower
            if self.lengths is not None:
                longest = int(self.lengths[index].max())
                items = [t[:, :longest] if t.ndim == 2 else t for t in items]
            return dict(zip(self.keys, items))
        gather = getattr(self.augment, "gather", None)  # the augmented batch straight from the dataset, in one copy
        positional = {"epoch": self._epoch_now} if getattr(self.augment, "positional", False) else {}
        images = self.tensors[0]
        if gather:
            images = gather(images, device_index, self._generator, **positional)
        elif rows is not None and images.dtype == torch.uint8 and rows[1] > rows[0]:  # in order: a view of the rows
            images = images[rows[0] : rows[1]]  # that div(255) below copies
        else:
            images = images.index_select(0, device_index)
        rest = [t.index_select(0, device_index) for t in self.tensors[1:]]
        if images.dtype == torch.uint8:
            images = images.div(255)  # one kernel: a float32 result
        if self.augment is not None and gather is None and positional:  # a positional one without `gather`
            images = self.augment(images, self._generator, index=device_index, **positional)
        elif self.augment is not None and gather is None:
            images = self.augment(images, self._generator)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return (images, *rest)


class _TransformedImages(Dataset):
    """uint8 images with per-sample torchvision transforms, returned as floats in [0, 1]."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Callable[[torch.Tensor], torch.Tensor]):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.transform(self.images[index]).float().div_(255), self.labels[index]


def image_dataloader(
    images: torch.Tensor, labels: torch.Tensor, *, batch_size: int, train: bool, augment: str, num_workers: int
) -> DataLoader:
    """A standard DataLoader with per-sample torchvision transforms (the CPU-worker alternative)."""
    from torchvision.transforms import v2

    steps: list[Any] = []
    if train and augment in ("flip", "flip_crop"):
        steps.append(v2.RandomHorizontalFlip())
    if train and augment == "flip_crop":
        steps.append(v2.RandomCrop(images.shape[-1], padding=max(1, images.shape[-1] // 8), padding_mode="reflect"))
    dataset = _TransformedImages(images, labels, v2.Compose(steps) if steps else torch.nn.Identity())
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train,
        drop_last=train and len(dataset) >= batch_size,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
