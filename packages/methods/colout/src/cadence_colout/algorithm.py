"""`ColOut`: the Event adapter over `colout_batch`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, RandomMethod, check_batch_key, check_bool, require_tensor
from cadence_colout.functional import check_colout_args, colout_batch

__all__ = ["ColOut"]


class ColOut(RandomMethod):
    """Drops random rows and columns of the training batch on AFTER_DATALOADER (generator set up on INIT).

    Arguments as in `colout_batch`. ``batch=False`` draws the lines per image on the device
    (Composer instead adds a dataset transform; `ColOutTransform` is that transform).
    ``input_key``/``target_key`` find the images and the target; ``seed`` fixes the generator.
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
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
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            return self.setup_generators(state)
        images = state.batch_get_item(self.input_key)
        sample = images if self.resize_target is False else (images, state.batch_get_item(self.target_key))
        drawn = {"batch": self.batch, "generator": self.generator("colout")}
        out = colout_batch(sample, self.p_row, self.p_col, self.resize_target, **drawn)
        new_images, new_target = out if isinstance(out, tuple) else (out, None)
        state.batch_set_item(self.input_key, new_images)
        if new_target is not None and new_target is not sample[1]:
            state.batch_set_item(self.target_key, new_target)

    def effects(self) -> Effects:
        touched = {Resource.INPUTS} | ({Resource.TARGETS} if self.resize_target is not False else set())
        return Effects(reads=touched, writes=touched)

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.input_key, "images (N, C, H, W)", key_name="input_key", ndim=4)
        if self.resize_target is True:
            require_tensor(self, batch, self.target_key, "segmentation targets", key_name="target_key")
