"""Adding a per-sample transform to a training dataset (Composer's dataset-transform path).

Methods that can also augment in the dataset (``RandAugment(batched=False)``, ``AugMix(batched=False)``,
``ColOut(batch=False)``) add their transform here at FIT_START. Torch only (torchvision is not needed:
its ``Compose`` is recognised by name).

A transform added later runs before those added earlier. FIT_START runs methods by ascending ``order``, and
AFTER_DATALOADER, where the same methods augment batches, by descending order: so the dataset applies them
in the order the batched path does (RandAugment, 55, before AugMix, 50, before ColOut, 30).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["add_dataset_transform"]

_TO_TENSOR = {"ToTensor", "PILToTensor", "ToImage", "ToImageTensor"}
_ADDED: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()  # dataset -> transforms added here


class _Then:
    """``second(first(x))``; picklable, so it reaches DataLoader worker processes."""

    def __init__(self, first: Callable[[Any], Any], second: Callable[[Any], Any]):
        self.first, self.second = first, second

    def __call__(self, sample: Any) -> Any:
        return self.second(self.first(sample))

    def __repr__(self) -> str:
        return f"{self.first!r} -> {self.second!r}"


def _insert(
    existing: Callable[[Any], Any] | None, transform: Callable[[Any], Any], added: list[Any]
) -> Callable[[Any], Any]:
    """`existing` with `transform` run first of the transforms `added` before, else just before the conversion to a
    tensor (on the final-size image, as Composer does), else before everything."""
    if existing is None:
        return transform
    steps = getattr(existing, "transforms", None)
    compose: Any = type(existing)  # torchvision's Compose, by name: torchvision is not imported here
    if compose.__name__ == "Compose" and isinstance(steps, list):
        for index, step in enumerate(steps):
            if any(step is other for other in added) or type(step).__name__ in _TO_TENSOR:
                return compose([*steps[:index], transform, *steps[index:]])
    return _Then(transform, existing)


def _defines_transform(dataset: Any) -> bool:
    own = getattr(dataset, "__dict__", {})
    return "transform" in own or any("transform" in vars(kind) for kind in type(dataset).__mro__[:-1])


def _transform_owner(dataset: Any) -> Any:
    """The dataset that holds the ``transform``, looking through wrappers (``Subset``, cadence's seeded
    samples) that keep the real dataset in ``.dataset``."""
    while not _defines_transform(dataset) and getattr(dataset, "dataset", None) is not None:
        dataset = dataset.dataset
    return dataset


def add_dataset_transform(dataloader: Any, transform: Callable[[Any], Any]) -> None:
    """Make `dataloader`'s dataset run `transform` on every raw sample.

    The dataset (or the one a ``Subset`` wraps) must have a ``transform`` attribute (a torchvision
    ``VisionDataset``). In a
    torchvision ``Compose`` the transform goes just before ``ToTensor``/``PILToTensor`` (so it sees
    the final-size image); otherwise it runs before the dataset's own transform. The user's
    ``Compose`` is copied, never changed (another dataset may share it). Worker processes copy the
    dataset when an iterator starts, so this works for ``num_workers=0`` and for workers started
    afterwards, but not for persistent workers already running, which raise here.
    """
    from torch.utils.data import DataLoader

    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"the dataset-transform path needs a torch DataLoader, got {type(dataloader).__name__}")
    dataset = _transform_owner(dataloader.dataset)
    if not hasattr(dataset, "transform"):
        raise TypeError(
            f"{type(dataset).__name__} has no `transform` attribute to extend; use a torchvision VisionDataset, "
            "add the transform to your dataset yourself, or augment on the device with batched=True"
        )
    if getattr(dataloader, "_iterator", None) is not None:
        raise RuntimeError(
            "the DataLoader's persistent workers are already running and would never see the new transform; "
            "use batched=True, or add the transform to the dataset before creating the DataLoader"
        )
    try:
        added = _ADDED.setdefault(dataset, [])
    except TypeError:  # a dataset that cannot be weakly referenced or hashed: earlier additions are not known
        added = []
    dataset.transform = _insert(dataset.transform, transform, added)
    added.append(transform)
    joint: Any = getattr(dataset, "transforms", None)
    if type(joint).__name__ == "StandardTransform":  # torchvision keeps a second reference here
        joint.transform = dataset.transform
