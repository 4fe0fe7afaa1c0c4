"""`AugmentationMethod`: the adapter shared by image-augmentation methods (RandAugment, AugMix, ...).

``batched=True`` augments every training batch on its device at AFTER_DATALOADER with the
method's one generator (named in its ``generators``; see `RandomMethod`). ``batched=False`` adds the method's per-image
transform to the training dataset at FIT_START, as Composer does (see
`cadence.ops.add_dataset_transform` for what that supports). A method says only how to augment
a batch and which transform to add.
"""

from __future__ import annotations

import weakref
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from cadence.algorithm import Effects, Resource
from cadence.batch import BatchKey, check_batch_key
from cadence.event import Event
from cadence.ops.applicability import require_tensor
from cadence.ops.checks import check_bool
from cadence.ops.dataset_transforms import add_dataset_transform
from cadence.ops.method import RandomMethod
from cadence.state import State

__all__ = ["AugmentationMethod"]

_IMAGE_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)


class AugmentationMethod(RandomMethod):
    events = (Event.INIT, Event.FIT_START, Event.AFTER_DATALOADER)
    order = 50  # on AFTER_DATALOADER (high runs first): after SelectiveBackprop (100), before ColOut/CutOut

    def __init__(self, batched: bool, input_key: BatchKey, *, seed: int | None = None):
        if len(self.generators) != 1:
            raise TypeError(f"{type(self).__name__} must name its one generator: generators = {{'<name>': 'device'}}")
        super().__init__(seed=seed)
        self.batched = check_bool("batched", batched, "True augments batches on the device, False the dataset")
        self.input_key = check_batch_key("input_key", input_key)
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
            self.setup_generators(state)
        elif event is Event.AFTER_DATALOADER:
            images = state.batch_get_item(self.input_key)
            generator = self.generator(next(iter(self.generators)))
            state.batch_set_item(self.input_key, self.augment_batch(images, generator))
        else:
            add_dataset_transform(state.dataloader, self.dataset_transform())
            self._datasets.add(state.dataloader.dataset)  # type: ignore[union-attr]

    def effects(self) -> Effects:
        if self.batched:
            return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})
        return Effects(writes={Resource.DATA})

    def check_applicable(self, model: Any, batch: Any) -> None:
        if self.batched:
            kwargs = {"key_name": "input_key", "ndim": 4, "channels": (1, 3), "dtypes": _IMAGE_DTYPES}
            require_tensor(self, batch, self.input_key, "images (N, C, H, W)", **kwargs)  # type: ignore[arg-type]
