"""`CutOut`: the Event adapter over `cutout_batch`."""

from __future__ import annotations

from typing import Any

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.batch import BatchKey, check_batch_key
from cadence.rng import MethodRNG
from cadence_cutout.functional import check_cutout_args, cutout_batch

__all__ = ["CutOut"]


class CutOut(Algorithm):
    """Zeroes square holes in the training images on AFTER_DATALOADER (its generator is set up on INIT).

    Arguments as in `cutout_batch`; ``input_key`` finds the images in the batch and ``seed``
    fixes the generator (default: derived from the run's seed and the method's name).
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 20

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
        self.num_holes, self.length, self.uniform_sampling = num_holes, length, uniform_sampling
        self.input_key = check_batch_key("input_key", input_key)
        self.seed = seed
        self.rng = MethodRNG("cutout", seed)

    def match(self, event: Event, state: State) -> bool:
        return event in self.events

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.rng.setup(state)
            return
        images = state.batch_get_item(self.input_key)
        kwargs = {"num_holes": self.num_holes, "length": self.length, "uniform_sampling": self.uniform_sampling}
        state.batch_set_item(self.input_key, cutout_batch(images, **kwargs, generator=self.rng.generator))

    def effects(self) -> Effects:
        return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.load_state_dict(state.get("rng", {}))
