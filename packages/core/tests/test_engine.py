"""Engine: dispatch order, FILO on AFTER_* events, the printed plan, conflicts, error context."""

from __future__ import annotations

import pytest
import torch

from cadence import Algorithm, Callback, Effects, Engine, Event, MethodConflictError, MethodError, Resource, State
from cadence.testing import tiny_image_classifier


def _state() -> State:
    return State(model=tiny_image_classifier(), max_duration="1ep")


class Recorder(Algorithm):
    events = (Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.AFTER_DATALOADER)

    def __init__(self, tag: str, log: list[str], order: int = 0):
        self.tag, self.log = tag, log
        self.order = order  # type: ignore[misc]  # instance override, for the test only

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        self.log.append(f"{self.tag}@{event.value}")


def test_sorted_by_order_and_reversed_on_after_events() -> None:
    log: list[str] = []
    algorithms = [Recorder("b", log, order=5), Recorder("a", log, order=-1), Recorder("c", log, order=5)]
    engine = Engine(_state(), algorithms=algorithms)
    engine.run_event(Event.BEFORE_LOSS)
    engine.run_event("after_loss")
    assert log == [
        "a@before_loss",
        "b@before_loss",
        "c@before_loss",  # ties keep the user's order
        "c@after_loss",
        "b@after_loss",
        "a@after_loss",  # FILO: nests like context managers
    ]


def test_declared_events_limit_dispatch_and_undeclared_ask_every_time() -> None:
    calls: list[Event] = []

    class Undeclared(Algorithm):
        def match(self, event, state):
            calls.append(event)
            return False

        def apply(self, event, state, logger):
            raise AssertionError("never matched")

    log: list[str] = []
    engine = Engine(_state(), algorithms=[Recorder("r", log), Undeclared()])
    for event in Event:
        engine.run_event(event)
    assert calls == list(Event)
    assert sorted(entry.split("@")[1] for entry in log) == ["after_dataloader", "after_loss", "before_loss"]


def test_callbacks_run_after_algorithms() -> None:
    log: list[str] = []

    class Watcher(Callback):
        def before_loss(self, state, logger):
            log.append("callback")

    engine = Engine(_state(), algorithms=[Recorder("r", log)], callbacks=[Watcher()])
    engine.run_event(Event.BEFORE_LOSS)
    assert log == ["r@before_loss", "callback"]


def test_run_planned_sees_a_method_that_a_callback_added_at_the_next_event() -> None:
    """The Trainer's in-batch events skip the check before each event; a list changed by what ran is replanned
    right after it, so the next event runs the new method, as `run_event` would."""
    log: list[str] = []
    state = _state()

    class Adder(Callback):
        def after_dataloader(self, state, logger):
            state.algorithms.append(Recorder("late", log))  # in place: the same list, one longer

    engine = Engine(state, callbacks=[Adder()])
    assert engine.run_planned(Event.BEFORE_LOSS) == {}  # idle: nothing planned
    engine.run_planned(Event.AFTER_DATALOADER)
    engine.run_planned(Event.BEFORE_LOSS)
    traces = engine.run_planned(Event.AFTER_LOSS)
    assert log == ["late@before_loss", "late@after_loss"]
    assert [trace.event for trace in traces.values()] == [Event.AFTER_LOSS]


def test_a_method_replaced_in_place_is_planned_at_the_next_event() -> None:
    log: list[str] = []
    state = _state()
    state.algorithms = [Recorder("old", log)]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    state.algorithms[0] = Recorder("new", log)  # the same list, the same length
    engine.run_event(Event.BEFORE_LOSS)
    assert log == ["old@before_loss", "new@before_loss"]


def test_run_planned_refuses_an_engine_closed_by_what_ran_and_names_failures() -> None:
    state = _state()

    class Closer(Callback):
        def batch_end(self, state, logger):
            engine.close()

    engine = Engine(state, callbacks=[Closer()])
    with pytest.raises(RuntimeError, match="this Engine was closed"):
        engine.run_planned(Event.BATCH_END)

    class Broken(Callback):
        def before_loss(self, state, logger):
            raise KeyError("k")

    with pytest.raises(MethodError, match=r"Broken failed on event 'before_loss'"):
        Engine(_state(), callbacks=[Broken()]).run_planned(Event.BEFORE_LOSS)


def test_plan_is_printable() -> None:
    log: list[str] = []
    engine = Engine(_state(), algorithms=[Recorder("x", log, order=1), Recorder("y", log, order=2)])
    plan = engine.describe()
    assert "before_loss           Recorder, Recorder" in plan
    assert [a.tag for a in engine.plan("after_loss")] == ["y", "x"]
    assert "(no methods or callbacks)" in Engine(_state()).describe()


def test_exceptions_name_the_method_and_event() -> None:
    class Broken(Algorithm):
        events = (Event.BATCH_END,)

        def match(self, event, state):
            return True

        def apply(self, event, state, logger):
            raise ZeroDivisionError("boom")

    engine = Engine(_state(), algorithms=[Broken()])
    with pytest.raises(MethodError, match=r"Broken failed on event 'batch_end': ZeroDivisionError: boom") as info:
        engine.run_event(Event.BATCH_END)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert info.value.owner == "Broken" and info.value.event is Event.BATCH_END


class LossInterpolator(Algorithm):
    events = (Event.AFTER_LOSS,)

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        pass

    def effects(self) -> Effects:
        return Effects(reads={Resource.LOSS}, exclusive={Resource.LOSS: "interpolates the loss"})


class OtherInterpolator(LossInterpolator):
    pass


def test_exclusive_claims_conflict_with_a_message_naming_both() -> None:
    with pytest.raises(MethodConflictError) as info:
        Engine(_state(), algorithms=[LossInterpolator(), OtherInterpolator()])
    message = str(info.value)
    assert "LossInterpolator and OtherInterpolator cannot be used together" in message
    assert "interpolates the loss" in message and "Fix:" in message


def test_named_conflicts_and_bad_entries() -> None:
    class Averager(Algorithm):
        events = (Event.BATCH_END,)

        def match(self, event, state):
            return False

        def apply(self, event, state, logger):
            pass

        def effects(self) -> Effects:
            return Effects(conflicts={"OtherAverager": "use one weight-averaging method"})

    class OtherAverager(Averager):
        def effects(self) -> Effects:
            return Effects()

    with pytest.raises(MethodConflictError, match=r"Averager and OtherAverager .* Fix: use one weight-averaging"):
        Engine(_state(), algorithms=[OtherAverager(), Averager()])
    with pytest.raises(TypeError, match=r"algorithms\[0\] is the class Averager; pass an instance: Averager\(\)"):
        Engine(_state(), algorithms=[Averager])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"algorithms\[0\] is a str.*callbacks go in callbacks"):
        Engine(_state(), algorithms=["mixup"])  # type: ignore[list-item]
    same = LossInterpolator()
    with pytest.raises(MethodConflictError, match="listed twice"):
        Engine(_state(), algorithms=[same, same])


class InputWriter(Algorithm):
    """Writes the batch inputs (shared, not exclusive)."""

    events = (Event.AFTER_DATALOADER,)

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        pass

    def effects(self) -> Effects:
        return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})


def test_non_conflicting_writers_compose() -> None:
    class OtherInputWriter(InputWriter):
        pass

    Engine(_state(), algorithms=[InputWriter(), OtherInputWriter(), LossInterpolator()])


def test_a_writing_method_listed_twice_is_refused_but_observers_and_opt_ins_are_not() -> None:
    with pytest.raises(MethodConflictError, match=r"InputWriter is listed twice \(positions 0 and 2\).*batch inputs"):
        Engine(_state(), algorithms=[InputWriter(), LossInterpolator(), InputWriter()])
    log: list[str] = []
    Engine(_state(), algorithms=[Recorder("a", log), Recorder("b", log)])  # writes nothing: fine twice

    class Repeatable(InputWriter):
        allow_duplicates = True

    Engine(_state(), algorithms=[Repeatable(), Repeatable()])


def test_state_batch_helpers_rebuild_instead_of_mutating() -> None:
    state = _state()
    original = (torch.zeros(2), torch.ones(2))
    state.batch = original
    state.batch_set_item(0, torch.full((2,), 3.0))
    assert original[0].sum() == 0 and state.batch_get_item(0).sum() == 6
    state.batch = {"x": torch.zeros(1)}
    state.batch_set_item("x", torch.ones(1))
    assert state.batch_get_item("x").item() == 1
    pair = (lambda b: b["x"], lambda b, v: {**b, "x": v})
    state.batch_set_item(pair, torch.full((1,), 7.0))
    assert state.batch_get_item(pair).item() == 7
    with pytest.raises(KeyError, match="input_key/target_key"):
        state.batch_get_item("missing")


def test_the_trainer_runs_a_method_that_a_callback_adds_mid_batch_from_the_next_event_on() -> None:
    """The Trainer's per-batch events skip the check before each event (`run_planned`); a method added by a
    callback at AFTER_FORWARD of batch 2 still runs at BEFORE_LOSS of that same batch, and a callback that replaces
    the callback list mid-batch is replanned before the next event too."""
    from cadence import Trainer

    log: list[str] = []
    seen: list[int] = []

    class Late(Callback):
        def after_forward(self, state, logger):
            if int(state.timestamp.batch) == 1 and not state.algorithms:
                state.algorithms.append(Recorder("late", log))

    class Counter(Callback):
        def before_loss(self, state, logger):
            seen.append(int(state.timestamp.batch))

    class Swapper(Callback):
        def after_forward(self, state, logger):
            if int(state.timestamp.batch) == 2:
                state.callbacks = [*state.callbacks, Counter()]

    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 2, (4,))) for _ in range(4)]
    model = tiny_image_classifier(num_classes=2)
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        max_duration="4ba",
        callbacks=[Late(), Swapper()],
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    assert log[:2] == ["late@before_loss", "late@after_loss"]  # batch 2 (timestamp.batch 1): from the next event
    assert log.count("late@before_loss") == 3  # batches 2, 3 and 4
    assert seen == [2, 3]  # added during batch 3's AFTER_FORWARD, it ran at that batch's BEFORE_LOSS
