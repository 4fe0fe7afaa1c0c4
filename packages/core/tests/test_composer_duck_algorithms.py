"""Composer's duck-typed algorithms: any object with callable ``match(event, state)`` and
``apply(event, state, logger)`` runs, as in Composer's engine (whose own tests build algorithms with
``unittest.mock.Mock``).

Such an object declares nothing, so the engine treats it conservatively: ``match`` is asked on every
event, it has order 0 (its place in the list among methods of order 0; reversed on ``AFTER_*`` events
like every method), it takes part in no conflict check (a log note says so, and ``describe()`` marks
it), and of Composer's optional members only correctly typed ones count. A class passed instead of an
instance, or an object without the two methods, is still refused.
"""

from __future__ import annotations

import logging
from unittest.mock import Mock

import pytest
import torch

from cadence import Algorithm, Effects, Engine, Event, Logger, MethodConflictError, Resource, State
from cadence.algorithm import DuckTypedAlgorithm, as_algorithm, has_algorithm_hooks
from cadence.testing import mlp_classifier


def _state(algorithms: list) -> State:
    return State(model=mlp_classifier(4, 2), max_duration="1ep", algorithms=algorithms)


class Plain:
    """A Composer-style method that subclasses nothing: it writes its tag to a shared list."""

    def __init__(self, tag: str, log: list[str], on: Event = Event.BATCH_END) -> None:
        self.tag, self.log, self.on = tag, log, on

    def match(self, event, state) -> bool:
        return event is self.on or event.value == f"after_{self.on.value.removeprefix('before_')}"

    def apply(self, event, state, logger) -> None:
        self.log.append(f"{self.tag}@{event.value}")


class Ordered(Algorithm):
    """A cadence method with a declared order, to place the duck-typed ones against."""

    events = (Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BATCH_END)

    def __init__(self, tag: str, log: list[str], order: int) -> None:
        self.tag, self.log, self._order = tag, log, order

    @property
    def order(self) -> int:  # type: ignore[override]  # per instance, for the test
        return self._order

    def match(self, event, state) -> bool:
        return True

    def apply(self, event, state, logger) -> None:
        self.log.append(f"{self.tag}@{event.value}")


class OwnsTheLoss(Algorithm):
    events = (Event.AFTER_LOSS,)

    def match(self, event, state) -> bool:
        return False

    def apply(self, event, state, logger) -> None:
        pass

    def effects(self) -> Effects:
        return Effects(exclusive={Resource.LOSS: "replaces the loss"})


@pytest.mark.parametrize("event", list(Event))
def test_a_mock_that_always_matches_runs_once_on_every_event(event: Event) -> None:
    algorithm = Mock(**{"match.return_value": True, "apply.return_value": 7})
    state = _state([algorithm])
    logger = Logger(state)
    traces = Engine(state, logger).run_event(event)
    algorithm.match.assert_called_once_with(event, state)
    algorithm.apply.assert_called_once_with(event, state, logger)
    (trace,) = traces.values()
    assert (trace.name, trace.event, trace.exit_code, trace.run) == ("Mock", event, 7, True)
    assert list(traces) == [f"{algorithm!r}/{event.value}"]  # Composer's key: the method, then the event


def test_a_mock_that_never_matches_is_asked_but_never_applied() -> None:
    algorithms = [Mock(**{"match.return_value": False}) for _ in range(3)]
    state = _state(algorithms)
    engine = Engine(state, Logger(state))
    for event in Event:
        assert not engine.run_event(event)
    for algorithm in algorithms:
        assert algorithm.match.call_count == len(Event)
        algorithm.apply.assert_not_called()


def test_duck_typed_methods_keep_their_place_among_order_zero_and_nest_on_after_events() -> None:
    log: list[str] = []
    first, second = Plain("first", log, Event.BEFORE_FORWARD), Plain("second", log, Event.BEFORE_FORWARD)
    early, late = Ordered("early", log, order=-1), Ordered("late", log, order=1)
    state = _state([late, first, early, second])
    engine = Engine(state)
    engine.run_event(Event.BEFORE_FORWARD)
    assert log == ["early@before_forward", "first@before_forward", "second@before_forward", "late@before_forward"]
    log.clear()
    engine.run_event(Event.AFTER_FORWARD)
    assert log == ["late@after_forward", "second@after_forward", "first@after_forward", "early@after_forward"]
    assert engine.plan(Event.BATCH_END) == [early, first, second, late]  # the objects as listed, no wrappers
    assert "Plain(match decides; effects undeclared)" in engine.describe()


def test_a_duck_typed_method_is_checked_against_nothing_and_the_engine_says_so(caplog) -> None:
    duck = Mock(**{"match.return_value": False})
    with caplog.at_level(logging.INFO, logger="cadence.engine"):
        Engine(_state([OwnsTheLoss(), duck, Mock(**{"match.return_value": False})]))  # no conflict error
    notes = [record.getMessage() for record in caplog.records]
    assert any("algorithms[1] (Mock) does not subclass cadence.Algorithm" in note for note in notes)
    with pytest.raises(MethodConflictError, match="OwnsTheLoss and OwnsTheLoss"):  # declared methods still are
        Engine(_state([OwnsTheLoss(), duck, OwnsTheLoss()]))


@pytest.mark.parametrize(
    ("listed", "message"),
    [
        (Plain, r"algorithms\[0\] is the class Plain; pass an instance: Plain\(\)"),
        (object(), r"algorithms\[0\] is a object, not a cadence.Algorithm \(nor an object with match"),
        ("mixup", r"algorithms\[0\] is a str.*callbacks go in callbacks"),
        (Mock(spec=["match"]), r"is a Mock, not a cadence.Algorithm"),  # no apply
        (type("NotCallable", (), {"match": True, "apply": True})(), r"is a NotCallable, not a cadence.Algorithm"),
    ],
)
def test_a_class_or_an_object_without_match_and_apply_is_still_refused(listed, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Engine(_state([listed]))


def test_the_same_duck_typed_instance_listed_twice_is_refused() -> None:
    duck = Plain("once", [])
    with pytest.raises(MethodConflictError, match=r"the same Plain instance is listed twice \(positions 0 and 1\)"):
        Engine(_state([duck, duck]))


def test_composers_optional_members_count_only_when_correctly_typed() -> None:
    mock = as_algorithm(Mock())
    assert isinstance(mock, DuckTypedAlgorithm)
    assert not mock.backwards_create_graph and not mock.find_unused_parameters and not mock.required_on_load()
    assert mock.state_dict() == {"repr": repr(mock.wrapped)}  # a Mock's state_dict() is no dict
    assert mock.name == "Mock" and repr(mock) == repr(mock.wrapped)

    class ComposerStyle:
        backwards_create_graph = True
        find_unused_parameters = True

        def __init__(self) -> None:
            self.loaded: dict | None = None

        def match(self, event, state):
            return False

        def apply(self, event, state, logger):
            return None

        @staticmethod
        def required_on_load() -> bool:
            return True

        def state_dict(self) -> dict:
            return {"step": 3}

        def load_state_dict(self, state: dict) -> None:
            self.loaded = state

    wrapped = ComposerStyle()
    view = as_algorithm(wrapped)
    assert view.backwards_create_graph and view.find_unused_parameters and view.required_on_load()
    assert view.state_dict() == {"step": 3}
    view.load_state_dict({"step": 4})
    assert wrapped.loaded == {"step": 4}
    assert as_algorithm(view) is view  # an Algorithm is its own view
    assert has_algorithm_hooks(wrapped) and not has_algorithm_hooks(ComposerStyle) and not has_algorithm_hooks(3)


def test_check_applicable_accepts_a_duck_typed_method() -> None:
    engine = Engine(_state([Plain("any", [])]))
    engine.check_applicable((torch.zeros(2, 4), torch.zeros(2, dtype=torch.long)))


def test_the_trainer_trains_checkpoints_and_resumes_with_a_mock_and_a_plain_duck_typed_method(tmp_path) -> None:
    """A Mock's truthy attributes do not switch on create_graph or surgery records; a plain object's own
    state_dict is saved and loaded back; a Mock without one saves its repr, as Composer's default."""
    from torch.utils.data import DataLoader, TensorDataset

    from cadence import Trainer

    class Counting:
        def __init__(self) -> None:
            self.batches = 0

        def match(self, event, state) -> bool:
            return event is Event.BATCH_END

        def apply(self, event, state, logger) -> None:
            self.batches += 1

        def state_dict(self) -> dict:
            return {"batches": self.batches}

        def load_state_dict(self, state: dict) -> None:
            self.batches = state["batches"]

    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))

    def trainer(counting: Counting, duration: str, **kwargs) -> Trainer:
        return Trainer(
            model=mlp_classifier(4, 2),
            train_dataloader=DataLoader(data, batch_size=4),
            max_duration=duration,
            algorithms=[Mock(**{"match.return_value": False}), counting],
            save_folder=str(tmp_path),
            save_interval="1ep",
            progress_bar=False,
            seed=0,
            **kwargs,
        )

    first = trainer(Counting(), "1ep")
    first.fit()
    first.close()
    resumed_counter = Counting()
    second = trainer(resumed_counter, "2ep", load_path=str(tmp_path / "latest.pt"))
    assert resumed_counter.batches == 4  # loaded from the checkpoint
    second.fit()
    second.close()
    assert resumed_counter.batches == 8
