"""`AugMix`: augments each training batch on its device, or the training dataset."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.augmentations import add_dataset_transform
from cadence.rng import MethodRNG
from cadence_augmix.functional import AugmentAndMixTransform, augmix_batch, check_augmix_args

__all__ = ["AugMix"]


class AugMix(Algorithm):
    """AugMix (Hendrycks et al., 2020): each image mixed with `width` chains of random operations.

    ``batched=True``: at AFTER_DATALOADER, `augmix_batch` augments the batch (``input_key``) on
    its device with the method's own generator (created at INIT, saved in ``state_dict``).
    ``batched=False``: at FIT_START, `AugmentAndMixTransform` is added to the training dataset, as
    in Composer (see `cadence.augmentations.add_dataset_transform` for what that supports).
    Images must be unnormalised (uint8, or float in [0, 1]): normalise inside the model or later.
    The JSD consistency loss of the paper is not part of this method. See `augmix_image` for the
    arguments.
    """

    events = (Event.INIT, Event.FIT_START, Event.AFTER_DATALOADER)
    order = 50

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[str] = "all",
        batched: bool = True,
        input_key: Any = 0,
    ):
        check_augmix_args(severity, depth, width, alpha, augmentation_set)
        if not isinstance(batched, bool):
            raise TypeError(
                f"`batched` must be True (augment batches on the device) or False (dataset), got {batched!r}"
            )
        self.severity, self.depth, self.width, self.alpha = severity, depth, width, alpha
        self.augmentation_set, self.batched, self.input_key = augmentation_set, batched, input_key
        self.rng = MethodRNG("augmix")
        self._datasets: weakref.WeakSet[Any] = weakref.WeakSet()

    def match(self, event: Event, state: State) -> bool:
        if event is Event.AFTER_DATALOADER:
            return self.batched
        if event is Event.FIT_START:
            return not self.batched and getattr(state.dataloader, "dataset", None) not in self._datasets
        return event is Event.INIT

    def _args(self) -> tuple[Any, ...]:
        return self.severity, self.depth, self.width, self.alpha, self.augmentation_set

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.rng.setup(state)
        elif event is Event.AFTER_DATALOADER:
            images = state.batch_get_item(self.input_key)
            state.batch_set_item(self.input_key, augmix_batch(images, *self._args(), self.rng.generator))
        else:
            add_dataset_transform(state.dataloader, AugmentAndMixTransform(*self._args()))
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
            f"AugMix(severity={self.severity}, depth={self.depth}, width={self.width}, alpha={self.alpha}, "
            f"augmentation_set={self.augmentation_set!r}, batched={self.batched}, input_key={self.input_key!r})"
        )
