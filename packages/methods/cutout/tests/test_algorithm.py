"""CutOut adapter: events, batch keys, validation, generator state."""

from __future__ import annotations

import pytest
import torch
from cadence_cutout import CutOut

from cadence import Event, Logger, Resource, State
from cadence.testing import tiny_image_classifier


def _state(batch: object) -> State:
    state = State(model=tiny_image_classifier(), max_duration="4ba")
    state.batch = batch
    return state


def _run(algorithm: CutOut, state: State) -> None:
    for event in (Event.INIT, Event.AFTER_DATALOADER):
        assert algorithm.match(event, state)
        algorithm.apply(event, state, Logger(state))


def test_matches_only_init_and_after_dataloader() -> None:
    algorithm, state = CutOut(), _state(None)
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT, Event.AFTER_DATALOADER]


def test_tuple_batch_changes_inputs_only_and_never_in_place() -> None:
    x, y = torch.rand(4, 3, 16, 16) + 0.5, torch.arange(4)
    batch = (x, y)
    state = _state(batch)
    _run(CutOut(length=0.25), state)
    new_x, new_y = state.batch
    assert new_y is y and batch[0] is x and not torch.equal(new_x, x)
    assert int((new_x == 0).sum()) > 0 and torch.all(x > 0)


def test_dict_batch_with_input_key() -> None:
    batch = {"image": torch.rand(2, 3, 8, 8) + 0.5, "label": torch.tensor([0, 1])}
    state = _state(batch)
    _run(CutOut(input_key="image"), state)
    assert int((state.batch["image"] == 0).sum()) > 0
    assert state.batch["label"] is batch["label"] and torch.all(batch["image"] > 0)


def test_generator_state_resumes_the_same_holes() -> None:
    x = torch.rand(4, 3, 16, 16) + 0.5
    first, state = CutOut(seed=1), _state((x, torch.arange(4)))
    _run(first, state)
    saved = first.state_dict()
    second = CutOut(seed=1)
    second.load_state_dict(saved)  # before INIT: applied when the generator is created
    state_a, state_b = _state((x, torch.arange(4))), _state((x, torch.arange(4)))
    first.apply(Event.AFTER_DATALOADER, state_a, Logger(state_a))
    _run(second, state_b)
    assert torch.equal(state_a.batch[0], state_b.batch[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": -0.5}, ValueError, "`length`"),
        ({"length": 2}, ValueError, "`length`"),
        ({"num_holes": 0}, ValueError, "`num_holes`"),
        ({"uniform_sampling": 1}, TypeError, "`uniform_sampling`"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CutOut(**kwargs)


def test_effects_and_repr() -> None:
    effects = CutOut().effects()
    assert effects.reads == {Resource.INPUTS} and effects.writes == {Resource.INPUTS}
    assert repr(CutOut(length=0.25, seed=3)) == (
        "CutOut(num_holes=1, length=0.25, uniform_sampling=False, input_key=0, seed=3)"
    )
