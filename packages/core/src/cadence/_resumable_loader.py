"""Data loading that can resume mid-epoch exactly and shard across ranks.

The trainer rebuilds a standard `DataLoader` around `ResumableSampler`: the order of each
epoch is a pure function of ``(seed, epoch)``, every rank takes a strided slice of the
same global order (so N ranks with batch B/N see what one rank with batch B sees), and a
resumed run skips the samples already trained on in O(1) instead of iterating over them.
The loader also gets its own ``torch.Generator``, so starting an epoch never draws from
the global RNG (which would shift every later random number on resume).

With worker processes, which sample a worker fetches (and so which random numbers a random
transform of the dataset draws) depends on timing and on how many samples the worker fetched
before, which a resume changes. So a rebuilt loader with workers fetches through
`SeededSamples`: every global RNG (torch, Python, NumPy) is seeded from ``(seed, epoch, index)``
before sample `index` is read, and a mid-epoch resume sees exactly the samples of the
uninterrupted run, whichever worker reads them.
"""

from __future__ import annotations

import inspect
import itertools
import random
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

__all__ = ["LoaderPlan", "ResumableSampler", "SeededSamples", "prepare_loader", "sample_seed"]

_MASK64 = 2**64 - 1


def _mix(value: int) -> int:
    """SplitMix64's finaliser: nearby inputs give unrelated 64-bit outputs."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of sample `index` in epoch `epoch` of a run seeded `seed`: 63 bits, a pure function."""
    return _mix(_mix(_mix(seed) ^ epoch) ^ index) & (2**63 - 1)


class SeededSamples(Dataset):
    """A map-style dataset read by ``(epoch, index)`` keys, each sample with every global RNG seeded
    from ``(seed, epoch, index)`` (see the module docstring). Attributes are those of the dataset."""

    def __init__(self, dataset: Any, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        seed = sample_seed(self.seed, epoch, index)
        random.seed(seed)
        torch.manual_seed(seed)
        try:
            import numpy as np
        except ImportError:  # numpy is optional
            pass
        else:
            np.random.seed(seed % 2**32)
        return self.dataset[index]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "seed"):  # not set yet (unpickling in a worker)
            raise AttributeError(name)
        return getattr(self.dataset, name)


class ResumableSampler(Sampler[int]):
    """Indices of one rank for one epoch, optionally starting part-way through it.

    Args:
        num_samples: length of the dataset.
        shuffle: draw a fresh permutation per epoch from ``(seed, epoch)``.
        seed: the same on every rank, so ranks agree on the global order.
        rank, world_size: this rank takes positions ``rank, rank + world_size, ...``.
        pad: repeat the first indices so every rank gets the same count (training needs
            equal step counts on all ranks); evaluation leaves it off so no sample counts twice.
        keyed: yield ``(epoch, index)`` keys (for `SeededSamples`) instead of indices.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        pad: bool = True,
        keyed: bool = False,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        self.num_samples = num_samples
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.pad = pad
        self.keyed = keyed
        self.epoch = 0
        self.start = 0  # samples of this rank's epoch already consumed

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch = epoch
        self.start = start

    def _rank_length(self) -> int:
        if self.pad:
            return -(-self.num_samples // self.world_size)
        return len(range(self.rank, self.num_samples, self.world_size))

    def __iter__(self) -> Iterator[Any]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_samples, generator=generator)
        else:
            order = torch.arange(self.num_samples)
        if self.pad and self.world_size > 1:
            missing = self._rank_length() * self.world_size - self.num_samples
            if missing:
                order = torch.cat([order, order[:missing]])
        mine = order[self.rank :: self.world_size][self.start :].tolist()
        return iter([(self.epoch, index) for index in mine] if self.keyed else mine)

    def __len__(self) -> int:
        return max(self._rank_length() - self.start, 0)


def _shuffle_of(loader: DataLoader) -> bool | None:
    """Whether the user's loader shuffles, or None when its sampler is custom."""
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler):
        if sampler.replacement or sampler._num_samples is not None:
            return None
        return True
    if isinstance(sampler, SequentialSampler):
        return False
    if isinstance(sampler, DistributedSampler):
        return sampler.shuffle
    return None


def _rebuild(loader: DataLoader, sampler: Sampler[Any], dataset: Any) -> DataLoader:
    accepted = inspect.signature(DataLoader.__init__).parameters
    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": torch.Generator(),
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    for optional in ("in_order",):
        value = getattr(loader, optional, None)
        if optional in accepted and value not in (None, ""):
            kwargs[optional] = value
    return DataLoader(dataset, **kwargs)


class LoaderPlan:
    """A prepared loader: ``epoch(e, skip_batches)`` yields the batches of epoch `e`."""

    def __init__(self, loader: Iterable[Any], sampler: ResumableSampler | None, seed: int):
        self.loader = loader
        self.sampler = sampler
        self.seed = seed
        try:  # the length of a whole epoch (the sampler's own length shrinks on a mid-epoch resume)
            self._length: int | None = len(loader)  # type: ignore[arg-type]
        except TypeError:
            self._length = None

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError(f"the loader ({type(self.loader).__name__}) has no length")
        return self._length

    def reseed(self, seed: int) -> None:
        """Follow `seed` from now on (a resumed run takes the seed of the run that wrote the checkpoint)."""
        self.seed = seed
        if self.sampler is not None:
            self.sampler.seed = seed
        dataset = getattr(self.loader, "dataset", None)
        if isinstance(dataset, SeededSamples):
            dataset.seed = seed

    @property
    def has_length(self) -> bool:
        return self._length is not None

    @property
    def batch_size(self) -> int | None:
        return getattr(self.loader, "batch_size", None)

    def epoch(self, epoch: int, skip_batches: int = 0) -> Iterator[Any]:
        if isinstance(self.loader, DataLoader) and isinstance(self.loader.generator, torch.Generator):
            self.loader.generator.manual_seed(self.seed * 1_000_003 + epoch)
        if self.sampler is not None:
            self.sampler.set_epoch(epoch, start=skip_batches * (self.batch_size or 1))
            return iter(self.loader)
        sampler = getattr(self.loader, "sampler", None)
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        iterator = iter(self.loader)
        return itertools.islice(iterator, skip_batches, None) if skip_batches else iterator


def prepare_loader(loader: Iterable[Any], *, seed: int, rank: int, world_size: int, train: bool) -> LoaderPlan:
    """Take over a user's loader: rebuild standard DataLoaders around `ResumableSampler`.

    Loaders cadence cannot rebuild (iterable datasets, custom samplers, plain iterables)
    are used as they are; resuming then re-reads the skipped batches, and with several
    ranks their sharding is the user's responsibility.
    """
    if isinstance(loader, DataLoader):
        shuffle = _shuffle_of(loader)
        rebuildable = (
            shuffle is not None and loader.batch_size is not None and not isinstance(loader.dataset, IterableDataset)
        )
        if rebuildable:
            workers = loader.num_workers > 0
            sampler = ResumableSampler(
                len(loader.dataset),  # type: ignore[arg-type]
                shuffle=bool(shuffle) and train,
                seed=seed,
                rank=rank,
                world_size=world_size,
                pad=train,
                keyed=workers,
            )
            dataset = SeededSamples(loader.dataset, seed) if workers else loader.dataset
            return LoaderPlan(_rebuild(loader, sampler, dataset), sampler, seed)
        if train and loader.num_workers > 0:
            warnings.warn(
                "this DataLoader has worker processes and a custom sampler or an iterable dataset, which cadence "
                "cannot rebuild: if its dataset draws random numbers (augmentations), a run resumed mid-epoch will "
                "not see the samples of the uninterrupted run. For exact resumes, use a map-style dataset with "
                "shuffle=True or False (cadence rebuilds those), or num_workers=0",
                stacklevel=3,
            )
        if world_size > 1 and not isinstance(loader.sampler, DistributedSampler):
            warnings.warn(
                "this DataLoader has a custom sampler or an iterable dataset, so cadence cannot shard it "
                "across ranks; every rank will read the same data unless the sampler shards it",
                stacklevel=3,
            )
    return LoaderPlan(loader, None, seed)
