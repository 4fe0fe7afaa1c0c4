"""`ColOut`: the Event adapter over `colout_batch`."""

from __future__ import annotations

import weakref
from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, RandomMethod, add_dataset_transform, check_batch_key, check_bool, require_tensor
from cadence_colout.functional import ColOutTransform, check_colout_args, colout_batch

__all__ = ["ColOut"]


class ColOut(RandomMethod):
    """Drops random rows and columns of the training images, per batch or per sample, as Composer.

    ``batch=True``: the same lines from every image of the batch on AFTER_DATALOADER, with the
    method's generator (set up on INIT; ``seed`` fixes it). ``batch=False``: `ColOutTransform` is
    added to the training dataset at FIT_START (once per dataset, Composer's per-sample mode), so
    each image draws its own lines in the loader (with torch's global RNG, which DataLoader workers
    seed per worker); the dataset needs a ``transform`` (see `cadence.ops.add_dataset_transform`).
    Arguments as in `colout_batch`; ``input_key``/``target_key`` find the images and the target.
    """

    events = (Event.INIT, Event.FIT_START, Event.AFTER_DATALOADER)
    order = 30  # inside the augmentations (50): lines drop from the augmented image
    generators = {"colout": "device"}

    def __init__(
        self,
        p_row: float = 0.15,
        p_col: float = 0.15,
        batch: bool = True,
        resize_target: bool | str = "auto",
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
        *,
        seed: int | None = None,
    ):
        check_colout_args(p_row, p_col, resize_target)
        super().__init__(seed=seed)
        self.p_row, self.p_col, self.resize_target = p_row, p_col, resize_target
        self.batch = check_bool("batch", batch, "True drops the same lines from every image of the batch")
        if resize_target is True and not self.batch:
            raise ValueError(
                "ColOut(batch=False, resize_target=True): the dataset transform sees only the image, so it cannot "
                "resize the target; use batch=True to drop the same lines from segmentation targets"
            )
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)
        self._datasets: weakref.WeakSet[Any] = weakref.WeakSet()  # datasets that already have the transform

    def match(self, event: Event, state: State) -> bool:
        if event is Event.AFTER_DATALOADER:
            return self.batch
        if event is Event.FIT_START:
            return not self.batch and getattr(state.dataloader, "dataset", None) not in self._datasets
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            return self.setup_generators(state)
        if event is Event.FIT_START:
            add_dataset_transform(state.dataloader, ColOutTransform(self.p_row, self.p_col, resize_target=False))
            self._datasets.add(state.dataloader.dataset)  # type: ignore[union-attr]
            return None
        images = state.batch_get_item(self.input_key)
        sample = images if self.resize_target is False else (images, state.batch_get_item(self.target_key))
        generator = self.generator("colout")
        out = colout_batch(sample, self.p_row, self.p_col, self.resize_target, batch=self.batch, generator=generator)
        new_images, new_target = out if isinstance(out, tuple) else (out, None)
        state.batch_set_item(self.input_key, new_images)
        if new_target is not None and new_target is not sample[1]:
            state.batch_set_item(self.target_key, new_target)

    def effects(self) -> Effects:
        if not self.batch:
            return Effects(writes={Resource.DATA})
        touched = {Resource.INPUTS} | ({Resource.TARGETS} if self.resize_target is not False else set())
        return Effects(reads=touched, writes=touched)

    def check_applicable(self, model: Any, batch: Any) -> None:
        if not self.batch:
            return  # the loader's samples are changed, not the batch
        require_tensor(self, batch, self.input_key, "images (N, C, H, W)", key_name="input_key", ndim=4)
        if self.resize_target is True:
            require_tensor(self, batch, self.target_key, "segmentation targets", key_name="target_key")
