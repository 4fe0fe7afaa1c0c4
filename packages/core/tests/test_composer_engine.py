"""Composer's documented Engine and Trainer-argument behaviour, for code that switches by changing imports.

- Every list argument of the Trainer (algorithms, callbacks, loggers, optimizers, schedulers) also
  takes one object.
- ``Engine(state, logger)``: the methods and callbacks come from the state.
- On INIT the log destinations run first, then the other callbacks, then the methods; on other
  events the methods, then the callbacks, then the destinations.
- ``close()`` calls every callback's ``close`` then ``post_close``, once; a closed engine runs no
  events; a callback still open in a live trainer cannot start in a second one (Composer's message).
- An engine nobody closed closes the callbacks it started when it is garbage-collected, and at exit.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Callback, Engine, Event, InMemoryLogger, Logger, LoggerDestination, State, Trainer
from cadence.schedulers import LinearScheduler
from cadence.testing import mlp_classifier


def _data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(12, 4, generator=generator), torch.randint(0, 2, (12,))), batch_size=4)


def _trainer(**kwargs) -> Trainer:
    torch.manual_seed(0)
    model = kwargs.pop("model", None) or mlp_classifier(4, 2)
    args = {
        "model": model,
        "train_dataloader": _data(),
        "max_duration": "3ba",
        "optimizers": torch.optim.SGD(model.parameters(), lr=0.1),
        "device": "cpu",
        "progress_bar": False,
        "seed": 0,
    }
    return Trainer(**{**args, **kwargs})


class CountBatches(Algorithm):
    events = (Event.BATCH_END,)

    def __init__(self) -> None:
        self.applied = 0

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        self.applied += 1


class Journal(Callback):
    """Writes `tag@event` to a shared list on INIT and BATCH_END; records close and post_close."""

    def __init__(self, tag: str = "callback", log: list[str] | None = None) -> None:
        self.tag, self.log = tag, log if log is not None else []

    def init(self, state, logger):
        self.log.append(f"{self.tag}@init")

    def batch_end(self, state, logger):
        self.log.append(f"{self.tag}@batch_end")

    def close(self, state, logger):
        self.log.append(f"{self.tag}.close")

    def post_close(self):
        self.log.append(f"{self.tag}.post_close")


class Destination(LoggerDestination, Journal):
    """A log destination that also writes to the journal."""


class Tagged(Algorithm):
    events = (Event.INIT, Event.BATCH_END)

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        self.log.append(f"method@{event.value}")


# 1. One object wherever Composer takes one object or a list ----------------------------------------
def test_every_list_argument_takes_a_single_object() -> None:
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    method, callback, destination = CountBatches(), Journal(), InMemoryLogger()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _trainer(
        model=model,
        optimizers=optimizer,
        schedulers=LinearScheduler(alpha_i=1.0, alpha_f=0.0, t_max="3ba"),
        algorithms=method,
        callbacks=callback,
        loggers=destination,
    )
    assert trainer.state.algorithms == [method] and trainer.state.optimizers == [optimizer]
    trainer.fit()
    assert method.applied == 3
    assert callback.log.count("callback@batch_end") == 3
    assert len(destination.data["loss/train/total"]) == 3
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the one optimizer stepped
    assert destination.most_recent_values["lr-SGD/group0"] == pytest.approx(0.0)  # the one schedule ran


def test_a_single_torch_lr_scheduler_is_taken_too() -> None:
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = _trainer(
        model=model,
        optimizers=optimizer,
        schedulers=torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
        max_duration="2ep",
    )
    trainer.fit()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)  # stepped once per epoch


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("algorithms", "mixup", r"algorithms\[0\] is a str.*callbacks go in callbacks"),
        ("callbacks", "progress", r"callbacks\[0\] is a str \('progress'\); expected a Callback"),
        ("loggers", "mlflow", r"loggers\[0\] is a str \('mlflow'\); expected a LoggerDestination"),
        ("optimizers", "sgd", r"optimizers\[0\] is a str \('sgd'\); expected a Optimizer"),
        ("schedulers", "cosine", r"schedulers\[0\] is a str \('cosine'\); expected a Scheduler or LRScheduler"),
        ("callbacks", Journal, r"callbacks\[0\] is the class Journal; pass an instance: Journal\(...\)"),
        ("loggers", [InMemoryLogger(), 3], r"loggers\[1\] is a int \(3\)"),
    ],
)
def test_a_wrong_type_names_the_argument(argument: str, value, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        _trainer(**{argument: value})


# 4. Composer's Engine(state, logger) -------------------------------------------------------------
def test_engine_takes_composers_positional_state_and_logger() -> None:
    log: list[str] = []
    method, callback = Tagged(log), Journal("callback", log)
    state = State(model=mlp_classifier(4, 2), max_duration="1ep", algorithms=[method], callbacks=[callback])
    logger = Logger(state)
    seen: list[Logger] = []

    class SeesLogger(Callback):
        def batch_end(self, state, logger):
            seen.append(logger)

    state.callbacks.append(SeesLogger())
    engine = Engine(state, logger)
    assert engine.logger is logger and engine.state is state
    engine.run_event(Event.BATCH_END)
    assert log == ["method@batch_end", "callback@batch_end"]  # the methods and callbacks of the state
    assert seen == [logger]


def test_engine_refuses_a_method_list_in_the_loggers_place() -> None:
    state = State(model=mlp_classifier(4, 2))
    with pytest.raises(TypeError, match=r"second argument is the Logger.*Engine\(state, algorithms=\[\.\.\.\]\)"):
        Engine(state, [CountBatches()])  # type: ignore[arg-type]


def test_on_init_destinations_then_callbacks_then_methods_and_the_reverse_after() -> None:
    log: list[str] = []
    state = State(
        model=mlp_classifier(4, 2),
        max_duration="1ep",
        algorithms=[Tagged(log)],
        callbacks=[Journal("callback", log), Destination("destination", log)],
    )
    engine = Engine(state, Logger(state))
    engine.run_event(Event.INIT)
    assert log == ["destination@init", "callback@init", "method@init"]
    log.clear()
    state.callbacks = [Destination("destination", log), Journal("callback", log)]  # listed first: still last
    engine.run_event(Event.BATCH_END)
    assert log == ["method@batch_end", "callback@batch_end", "destination@batch_end"]


def test_the_trainer_runs_destinations_first_on_init() -> None:
    log: list[str] = []
    trainer = _trainer(algorithms=[Tagged(log)], callbacks=[Journal("callback", log)], loggers=[Destination("d", log)])
    assert log == ["d@init", "callback@init", "method@init"]
    trainer.close()


# Closing ------------------------------------------------------------------------------------------
def test_close_closes_then_post_closes_every_callback_once() -> None:
    log: list[str] = []
    state = State(model=mlp_classifier(4, 2), callbacks=[Journal("a", log), Journal("b", log)])
    engine = Engine(state)
    engine.close()
    engine.close()
    assert log == ["a.close", "b.close", "a.post_close", "b.post_close"]
    assert engine.closed


def test_a_failing_close_is_a_warning_that_skips_only_its_post_close() -> None:
    log: list[str] = []

    class BadClose(Journal):
        def close(self, state, logger):
            raise OSError("disk gone")

    state = State(model=mlp_classifier(4, 2), callbacks=[BadClose("bad", log), Journal("good", log)])
    with pytest.warns(UserWarning, match=r"BadClose.close\(\) failed: OSError: disk gone"):
        Engine(state).close()
    assert log == ["good.close", "good.post_close"]


def test_a_closed_engine_runs_no_event() -> None:
    engine = Engine(State(model=mlp_classifier(4, 2)), algorithms=[CountBatches()])
    engine.close()
    for run in (engine.run_event, engine.run_algorithms, engine.run_callbacks):
        with pytest.raises(RuntimeError, match=r"Engine was closed .*create a new Trainer"):
            run(Event.BATCH_END)
    with pytest.raises(RuntimeError, match="closed"):
        engine.run_event("batch_end")


def test_a_closed_trainer_cannot_fit_again() -> None:
    trainer = _trainer()
    trainer.fit()
    trainer.close()
    with pytest.raises(RuntimeError, match="closed"):
        trainer.fit()


def test_trainer_close_closes_its_callbacks() -> None:
    callback = Journal()
    trainer = _trainer(callbacks=[callback])
    trainer.fit()
    assert "callback.close" not in callback.log  # fit may be called again
    trainer.close()
    assert callback.log[-2:] == ["callback.close", "callback.post_close"]


# A callback serves one run at a time ------------------------------------------------------------
def test_a_callback_still_open_in_a_live_trainer_cannot_start_another() -> None:
    callback, destination = Journal(), InMemoryLogger()
    first = _trainer(callbacks=[callback])
    with pytest.raises(RuntimeError, match=r"Journal is still open in a previous Trainer.*trainer\.close\(\)"):
        _trainer(callbacks=[callback])
    composers = "Cannot create a new trainer with an open callback or logger from a previous trainer"
    with pytest.raises(RuntimeError, match=composers):  # the words Composer users match on
        _trainer(callbacks=[callback])
    second = _trainer(loggers=[destination])
    with pytest.raises(RuntimeError, match="InMemoryLogger is still open"):
        _trainer(loggers=[destination])
    first.close()
    second.close()
    third = _trainer(callbacks=[callback], loggers=[destination])  # closed: free again
    third.fit()
    assert destination.state is third.state
    third.close()


def test_a_callback_of_a_discarded_engine_is_free_again() -> None:
    callback = Journal()
    state = State(model=mlp_classifier(4, 2), callbacks=[callback])
    engine = Engine(state)
    engine.run_event(Event.INIT)
    del engine  # never closed, but nothing can run it any more
    gc.collect()
    other = Engine(State(model=mlp_classifier(4, 2), callbacks=[callback]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other.run_event(Event.INIT)
    other.close()


def test_the_same_engine_may_run_init_twice() -> None:
    engine = Engine(State(model=mlp_classifier(4, 2), callbacks=[Journal()]))
    engine.run_event(Event.INIT)
    engine.run_event(Event.INIT)  # its own callbacks are not "open elsewhere"
    engine.close()


def test_an_engine_nobody_closed_closes_its_callbacks_when_garbage_collected() -> None:
    log: list[str] = []
    engine = Engine(State(model=mlp_classifier(4, 2), callbacks=[Journal("a", log)]))
    engine.run_event(Event.INIT)
    del engine  # the last reference: Composer's Engine.__del__ closes it
    assert log == ["a@init", "a.close", "a.post_close"]


def test_an_engine_that_never_started_a_callback_closes_none_when_collected() -> None:
    log: list[str] = []
    callback = Journal("shared", log)
    first = Engine(State(model=mlp_classifier(4, 2), callbacks=[callback]))
    first.run_event(Event.INIT)
    second = Engine(State(model=mlp_classifier(4, 2), callbacks=[callback]))
    with pytest.raises(RuntimeError, match="still open"):
        second.run_event(Event.INIT)
    del second
    gc.collect()
    assert log == ["shared@init"]  # still the first engine's, still open
    first.close()
    assert log == ["shared@init", "shared.close", "shared.post_close"]


def test_engines_still_open_at_exit_close_their_callbacks() -> None:
    code = textwrap.dedent(
        """
        from cadence import Callback, Engine, Event, State
        from cadence.testing import mlp_classifier

        class Says(Callback):
            def close(self, state, logger):
                print("closed")

            def post_close(self):
                print("post-closed")

        engine = Engine(State(model=mlp_classifier(4, 2), callbacks=[Says()]))
        engine.run_event(Event.INIT)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["closed", "post-closed"]
