"""`RunData`: a run's training and evaluation loaders, prepared for exact resume and sharding, with
Composer's ``train_subset_num_batches`` / ``eval_subset_num_batches`` cuts."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from cadence._resumable_loader import LoaderPlan, prepare_loader

__all__ = ["RunData", "check_loader", "check_subset_num_batches", "limited"]


def limited(batches: Iterator[Any], subset_num_batches: int) -> Iterator[Any]:
    """The first `subset_num_batches` of `batches` (all of them for -1)."""
    return batches if subset_num_batches == -1 else itertools.islice(batches, subset_num_batches)


def check_subset_num_batches(name: str, value: Any) -> int:
    """-1 (every batch) or a positive number of batches, as Composer's ``*_subset_num_batches``."""
    if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or value >= 1):
        raise ValueError(f"{name}={value!r} must be -1 (every batch) or an int >= 1 (that many batches)")
    return value


def check_loader(name: str, loader: Any) -> None:
    """A loader is an iterable of batches; a string (iterable over its characters) or a non-iterable is a
    mistake that would otherwise surface steps later as a confusing batch error."""
    if isinstance(loader, (str, bytes)) or not isinstance(loader, Iterable):
        shown = repr(loader) if len(repr(loader)) <= 60 else repr(loader)[:57] + "..."
        raise TypeError(
            f"{name}={shown} is a {type(loader).__name__}, not an iterable of batches; pass a torch DataLoader or "
            "any iterable that yields batches (a list of (inputs, targets) tuples works)"
        )


class RunData:
    """The loaders of one run (on this rank), each a `LoaderPlan`, and how much of each a pass uses."""

    def __init__(self, seed: int, rank: int, world_size: int):
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.train: LoaderPlan | None = None
        self.eval: LoaderPlan | None = None
        self.train_subset = self.eval_subset = -1

    def set_train(self, loader: Iterable[Any] | None, subset_num_batches: int | None = None) -> None:
        if subset_num_batches is not None:
            self.train_subset = check_subset_num_batches("train_subset_num_batches", subset_num_batches)
        if loader is not None:
            check_loader("train_dataloader", loader)
            self.train = prepare_loader(loader, seed=self.seed, rank=self.rank, world_size=self.world_size, train=True)

    def set_eval(self, loader: Iterable[Any] | None, subset_num_batches: int | None = None) -> None:
        if subset_num_batches is not None:
            self.eval_subset = check_subset_num_batches("eval_subset_num_batches", subset_num_batches)
        if loader is not None:
            check_loader("eval_dataloader", loader)
            self.eval = self.plan(loader)

    def plan(self, loader: Iterable[Any]) -> LoaderPlan:
        """An evaluation-style plan (every sample once, in order) for `loader`."""
        return prepare_loader(loader, seed=self.seed, rank=self.rank, world_size=self.world_size, train=False)

    def epoch_length(self) -> int | None:
        """Batches per training epoch: the loader's, cut to ``train_subset_num_batches`` (None when unknown)."""
        if self.train is None:
            return None
        if not self.train.has_length:
            return None if self.train_subset == -1 else self.train_subset
        return len(self.train) if self.train_subset == -1 else min(len(self.train), self.train_subset)

    def eval_batches(self, subset_num_batches: int | None = None) -> Iterator[Any]:
        """One pass over the evaluation loader, cut to `subset_num_batches` (default: ``eval_subset``)."""
        assert self.eval is not None
        subset = self.eval_subset if subset_num_batches in (None, -1) else subset_num_batches
        return limited(self.eval.epoch(0), subset)

    def reseed(self, seed: int) -> None:
        """The data order of a resumed run follows the seed of the run that wrote the checkpoint."""
        self.seed = seed
        for plan in (self.train, self.eval):
            if plan is not None:
                plan.reseed(seed)
