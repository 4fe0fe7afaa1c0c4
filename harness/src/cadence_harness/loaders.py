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
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

__all__ = ["TensorLoader", "batch_crop", "batch_flip_lr", "image_dataloader", "make_augment"]


def batch_flip_lr(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mirror a random half of the images left-right."""
    flip = torch.rand(images.shape[0], 1, 1, 1, device=images.device, generator=generator) < 0.5
    return torch.where(flip, images.flip(-1), images)


def batch_crop(images: torch.Tensor, padding: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random crops of the original size from reflect-padded images, one offset per image, as one gather."""
    n, c, h, w = images.shape
    padded = F.pad(images, (padding,) * 4, mode="reflect")
    dy = torch.randint(0, 2 * padding + 1, (n, 1), device=images.device, generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), device=images.device, generator=generator)
    rows = (dy + torch.arange(h, device=images.device))[:, None, :, None]  # (N, 1, H, 1)
    cols = (dx + torch.arange(w, device=images.device))[:, None, None, :]  # (N, 1, 1, W)
    batch = torch.arange(n, device=images.device)[:, None, None, None]
    channel = torch.arange(c, device=images.device)[None, :, None, None]
    return padded[batch, channel, rows, cols]


def make_augment(kind: str, image_size: int) -> Callable[[torch.Tensor, torch.Generator | None], torch.Tensor] | None:
    """The batch augmentation for `kind` (``none``, ``flip``, ``flip_crop``); crop padding is 1/8 of the side."""
    if kind == "none":
        return None
    padding = max(1, image_size // 8)

    def augment(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        images = batch_flip_lr(images, generator)
        return batch_crop(images, padding, generator) if kind == "flip_crop" else images

    return augment


class TensorLoader:
    """Shuffled batches sliced from tensors that already live on the device.

    Args:
        tensors: equal-length tensors; images (uint8 or float) come first when `images` is True.
        batch_size, shuffle, drop_last: as in `DataLoader`.
        seed: epoch ``e`` uses the permutation of ``seed + e``, so runs repeat exactly.
        augment: ``augment(images, generator)`` applied to each image batch on its device.
        keys: when given, batches are dicts with these keys (text); else tuples.
        lengths: per-sample token counts (on the CPU); text batches are trimmed to their longest
            sample, read from this host copy so trimming costs no device synchronisation.
        channels_last: hand image batches to the model in channels_last memory format.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool = False,
        seed: int = 0,
        augment: Callable[[torch.Tensor, torch.Generator | None], torch.Tensor] | None = None,
        keys: tuple[str, ...] | None = None,
        lengths: torch.Tensor | None = None,
        channels_last: bool = False,
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
        self.epoch = 0
        self.device = tensors[0].device
        self._generator = torch.Generator(device=self.device)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.num_samples)
        return torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))

    def __iter__(self) -> Iterator[Any]:
        order = self._start_epoch()
        self.epoch += 1
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[start : start + self.batch_size]
            yield self._batch(index)

    def _start_epoch(self) -> torch.Tensor:
        """The epoch's sample order; the augmentation generator restarts from the epoch's seed."""
        self._generator.manual_seed(self.seed * 7919 + self.epoch)
        return self._order()

    def peek(self) -> Any:
        """The first batch the next epoch will yield, without advancing anything (for checks before training)."""
        return self._batch(self._start_epoch()[: self.batch_size])

    def _batch(self, index: torch.Tensor) -> Any:
        device_index = index.to(self.device)
        items = [t[device_index] for t in self.tensors]
        if self.keys is not None:
            if self.lengths is not None:
                longest = int(self.lengths[index].max())
                items = [t[:, :longest] if t.ndim == 2 else t for t in items]
            return dict(zip(self.keys, items))
        images, *rest = items
        if images.dtype == torch.uint8:
            images = images.float().div_(255)
        if self.augment is not None:
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
