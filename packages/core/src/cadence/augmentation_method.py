"""`AugmentationMethod`: the adapter shared by image-augmentation methods (RandAugment, AugMix, ...).

``batched=True`` augments every training batch on its device at AFTER_DATALOADER with the
method's own generator (created at INIT, saved in ``state_dict``). ``batched=False`` adds the
method's per-image transform to the training dataset at FIT_START, as Composer does (see
`cadence.augmentations.add_dataset_transform` for what that supports). A method says only how
to augment a batch and which transform to add.
"""

from __future__ import annotations

import weakref
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from cadence.algorithm import Algorithm, Effects, Resource
from cadence.augmentations import add_dataset_transform
from cadence.batch import BatchKey, check_batch_key
from cadence.event import Event
from cadence.rng import MethodRNG
from cadence.state import State

__all__ = ["AugmentationMethod"]


class AugmentationMethod(Algorithm):
    events = (Event.INIT, Event.FIT_START, Event.AFTER_DATALOADER)
    order = 50  # on AFTER_DATALOADER (high runs first): after SelectiveBackprop (100), before ColOut/CutOut

    def __init__(self, name: str, batched: bool, input_key: BatchKey):
        if not isinstance(batched, bool):
            raise TypeError(
                f"`batched` must be True (augment batches on the device) or False (dataset), got {batched!r}"
            )
        self.batched = batched
        self.input_key = check_batch_key("input_key", input_key)
        self.rng = MethodRNG(name)
        self._datasets: weakref.WeakSet[Any] = weakref.WeakSet()

    @abstractmethod
    def augment_batch(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Augment an unnormalised NCHW batch (uint8, or float in [0, 1]) on its device."""

    @abstractmethod
    def dataset_transform(self) -> Callable[[Any], Any]:
        """The per-image transform added to the dataset when ``batched=False``."""

    def match(self, event: Event, state: State) -> bool:
        if event is Event.AFTER_DATALOADER:
            return self.batched
        if event is Event.FIT_START:
            return not self.batched and getattr(state.dataloader, "dataset", None) not in self._datasets
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.rng.setup(state)
        elif event is Event.AFTER_DATALOADER:
            images = state.batch_get_item(self.input_key)
            state.batch_set_item(self.input_key, self.augment_batch(images, self.rng.generator))
        else:
            add_dataset_transform(state.dataloader, self.dataset_transform())
            self._datasets.add(state.dataloader.dataset)  # type: ignore[union-attr]

    def effects(self) -> Effects:
        if self.batched:
            return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})
        return Effects(writes={Resource.DATA})

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.load_state_dict(state.get("rng", {}))
