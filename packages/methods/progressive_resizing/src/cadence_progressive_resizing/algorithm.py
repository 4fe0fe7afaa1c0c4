"""`ProgressiveResizing`: the Event adapter over `progressive_resizing_scale` and `resize_batch`."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, RandomMethod, check_batch_key, check_bool, require_tensor
from cadence_progressive_resizing.functional import (
    check_interpolation,
    check_resizing_args,
    progressive_resizing_scale,
    resize_batch,
)

__all__ = ["ProgressiveResizing"]


class ProgressiveResizing(RandomMethod):
    """Shrinks the training batch on AFTER_DATALOADER by the scheduled scale; runs on no other event.

    Schedule: `progressive_resizing_scale` of the elapsed duration and the batch's width;
    resizing: `resize_batch` (``interpolation``: 'nearest', Composer's, or antialiased 'bilinear').
    ``input_key``/``target_key`` find the images and the target (read only when ``resize_targets``);
    ``seed`` fixes the crop generator, which a run creates on its first batch (as Composer, the
    method does not run on INIT).
    """

    events = (Event.AFTER_DATALOADER,)
    order = 10  # innermost on AFTER_DATALOADER: the other image methods see the resized batch
    generators = {"progressive_resizing": "device"}

    def __init__(
        self,
        mode: str = "resize",
        initial_scale: float = 0.5,
        finetune_fraction: float = 0.2,
        delay_fraction: float = 0.5,
        size_increment: int = 4,
        resize_targets: bool = False,
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
        *,
        interpolation: str = "nearest",
        seed: int | None = None,
    ):
        check_resizing_args(mode, initial_scale, finetune_fraction, delay_fraction, size_increment)
        super().__init__(seed=seed)
        self.mode, self.initial_scale, self.size_increment = mode, initial_scale, size_increment
        self.finetune_fraction, self.delay_fraction = finetune_fraction, delay_fraction
        self.resize_targets = check_bool("resize_targets", resize_targets)
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)
        self.interpolation = check_interpolation(interpolation)
        self._run: weakref.ref[State] | None = None  # the run whose generator is set up

    def _crop_generator(self, state: State) -> torch.Generator:
        """The crop generator, set up (seeded, on the run's device) on the first batch of each run."""
        if self._run is None or self._run() is not state:
            self.setup_generators(state)
            self._run = weakref.ref(state)
        return self.generator("progressive_resizing")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # fresh generators hold the loaded state until the run's first batch sets them up
        RandomMethod.__init__(self, seed=self.seed)
        self._run = None
        super().load_state_dict(state)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        elapsed = state.get_elapsed_duration()
        if elapsed is None:
            raise ValueError("ProgressiveResizing follows a schedule over the run: set the Trainer's max_duration")
        images = state.batch_get_item(self.input_key)
        target = state.batch_get_item(self.target_key) if self.resize_targets else None
        schedule = (self.initial_scale, self.finetune_fraction, self.delay_fraction, self.size_increment)
        scale = progressive_resizing_scale(elapsed.value, images.shape[-1], *schedule)
        generator = self._crop_generator(state)
        new_images, new_target = resize_batch(
            images, target, scale, self.mode, self.resize_targets, interpolation=self.interpolation, generator=generator
        )
        state.batch_set_item(self.input_key, new_images)
        if self.resize_targets:
            state.batch_set_item(self.target_key, new_target)
        logger.log_metrics(  # Composer's keys
            {
                "progressive_resizing/height": new_images.shape[-2],
                "progressive_resizing/width": new_images.shape[-1],
                "progressive_resizing/scale_factor": scale,
            }
        )

    def effects(self) -> Effects:
        touched = {Resource.INPUTS} | ({Resource.TARGETS} if self.resize_targets else set())
        return Effects(reads=touched | {Resource.DURATION}, writes=touched)  # sizes follow the elapsed fraction

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.input_key, "images (N, C, H, W)", key_name="input_key", ndim=4)
        if self.resize_targets:
            require_tensor(self, batch, self.target_key, "segmentation targets", key_name="target_key", ndim=(3, 4))
