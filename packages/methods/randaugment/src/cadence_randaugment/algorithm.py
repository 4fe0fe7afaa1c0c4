"""`RandAugment`: augments each training batch on its device, or the training dataset."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.augmentations import add_dataset_transform
from cadence.rng import MethodRNG
from cadence_randaugment.functional import RandAugmentTransform, check_randaugment_args, randaugment_batch

__all__ = ["RandAugment"]


class RandAugment(Algorithm):
    """RandAugment (Cubuk et al., 2020): `depth` random operations of strength `severity` per image.

    ``batched=True``: at AFTER_DATALOADER, `randaugment_batch` augments the batch (``input_key``)
    on its device with the method's own generator (created at INIT, saved in ``state_dict``).
    ``batched=False``: at FIT_START, `RandAugmentTransform` is added to the training dataset, as in
    Composer (see `cadence.augmentations.add_dataset_transform` for what that supports).
    Images must be unnormalised (uint8, or float in [0, 1]): normalise inside the model or later.
    See `randaugment_image` for the arguments.
    """

    events = (Event.INIT, Event.FIT_START, Event.AFTER_DATALOADER)
    order = 50

    def __init__(
        self,
        severity: float = 9,
        depth: int = 2,
        augmentation_set: str | Sequence[str] = "all",
        batched: bool = True,
        input_key: Any = 0,
    ):
        check_randaugment_args(severity, depth, augmentation_set)
        if not isinstance(batched, bool):
            raise TypeError(
                f"`batched` must be True (augment batches on the device) or False (dataset), got {batched!r}"
            )
        self.severity, self.depth, self.augmentation_set = severity, depth, augmentation_set
        self.batched, self.input_key = batched, input_key
        self.rng = MethodRNG("randaugment")
        self._datasets: weakref.WeakSet[Any] = weakref.WeakSet()

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
            out = randaugment_batch(images, self.severity, self.depth, self.augmentation_set, self.rng.generator)
            state.batch_set_item(self.input_key, out)
        else:
            add_dataset_transform(
                state.dataloader, RandAugmentTransform(self.severity, self.depth, self.augmentation_set)
            )
            self._datasets.add(state.dataloader.dataset)  # type: ignore[union-attr]

    def effects(self) -> Effects:
        if self.batched:
            return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})
        return Effects(writes={Resource.DATA})

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.load_state_dict(state.get("rng", {}))

    def __repr__(self) -> str:
        return (
            f"RandAugment(severity={self.severity}, depth={self.depth}, augmentation_set={self.augmentation_set!r}, "
            f"batched={self.batched}, input_key={self.input_key!r})"
        )
