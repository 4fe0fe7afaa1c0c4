"""`ColOut`: the Event adapter over `colout_batch`."""

from __future__ import annotations

from typing import Any

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.batch import BatchKey, check_batch_key
from cadence.rng import MethodRNG
from cadence_colout.functional import check_colout_args, colout_batch

__all__ = ["ColOut"]


class ColOut(Algorithm):
    """Drops random rows and columns of the training batch on AFTER_DATALOADER (generator set up on INIT).

    Arguments as in `colout_batch`. ``batch=False`` draws the lines per image on the device
    (Composer instead adds a dataset transform; `ColOutTransform` is that transform).
    ``input_key``/``target_key`` find the images and the target; ``seed`` fixes the generator.
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 30

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
        if not isinstance(batch, bool):
            raise TypeError(f"`batch`={batch!r} must be a bool (True: same lines for the whole batch)")
        self.p_row, self.p_col, self.batch, self.resize_target = p_row, p_col, batch, resize_target
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)
        self.seed = seed
        self.rng = MethodRNG("colout", seed)

    def match(self, event: Event, state: State) -> bool:
        return event in self.events

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.rng.setup(state)
            return
        images = state.batch_get_item(self.input_key)
        sample = images if self.resize_target is False else (images, state.batch_get_item(self.target_key))
        kwargs = {"batch": self.batch, "generator": self.rng.generator}
        out = colout_batch(sample, self.p_row, self.p_col, self.resize_target, **kwargs)
        new_images, new_target = out if isinstance(out, tuple) else (out, None)
        state.batch_set_item(self.input_key, new_images)
        if new_target is not None and new_target is not sample[1]:
            state.batch_set_item(self.target_key, new_target)

    def effects(self) -> Effects:
        touched = {Resource.INPUTS} | ({Resource.TARGETS} if self.resize_target is not False else set())
        return Effects(reads=touched, writes=touched)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.load_state_dict(state.get("rng", {}))
