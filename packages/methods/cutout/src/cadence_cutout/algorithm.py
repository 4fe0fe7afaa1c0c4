"""`CutOut`: the Event adapter over `cutout_batch`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, RandomMethod, check_batch_key, require_tensor
from cadence_cutout.functional import check_cutout_args, cutout_batch

__all__ = ["CutOut"]


class CutOut(RandomMethod):
    """Zeroes square holes in the training images on AFTER_DATALOADER (its generator is set up on INIT).

    Arguments as in `cutout_batch`; ``input_key`` finds the images in the batch and ``seed``
    fixes the generator (default: derived from the run's seed).
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 20  # inside the augmentations (50) on AFTER_DATALOADER: holes are cut in the augmented image
    generators = {"cutout": "device"}

    def __init__(
        self,
        num_holes: int = 1,
        length: float = 0.5,
        uniform_sampling: bool = False,
        input_key: BatchKey = 0,
        *,
        seed: int | None = None,
    ):
        check_cutout_args(num_holes, length, uniform_sampling)
        super().__init__(seed=seed)
        self.num_holes, self.length, self.uniform_sampling = num_holes, length, uniform_sampling
        self.input_key = check_batch_key("input_key", input_key)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            return self.setup_generators(state)
        images = state.batch_get_item(self.input_key)
        holes = cutout_batch(
            images, self.num_holes, self.length, self.uniform_sampling, generator=self.generator("cutout")
        )
        state.batch_set_item(self.input_key, holes)

    def effects(self) -> Effects:
        return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.input_key, "images (N, C, H, W)", key_name="input_key", ndim=4)
