"""Faults a new user runs into: arguments that cannot be meant, NaN losses, empty evaluation, and how a
run ends (exactly one FINISHED, FAILED or KILLED, also when the process gets SIGTERM or SIGINT)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, InMemoryLogger, LoggerDestination, State, Trainer, schedulers
from cadence import checkpoint as ckpt
from cadence.nonfinite import NonFiniteLossError, NonFiniteLossGuard
from cadence.testing import mlp_classifier


class StatusRecorder(LoggerDestination):
    """Records every `finish` call: the trainer must make exactly one."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, str | None]] = []

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        self.finished.append((status, type(error).__name__ if error is not None else None))


def _data(n: int = 16, poison_at: int | None = None) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 4, generator=generator), torch.randint(0, 2, (n,), generator=generator)
    if poison_at is not None:
        x[poison_at, 1] = float("nan")  # one NaN value in the inputs
    return TensorDataset(x, y)


def _trainer(dataset: TensorDataset | None = None, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    args = {
        "model": model,
        "train_dataloader": DataLoader(dataset if dataset is not None else _data(), batch_size=4),
        "max_duration": "2ep",
        "optimizers": torch.optim.SGD(model.parameters(), lr=0.1),
        "progress_bar": False,
        "seed": 1,
    }
    return Trainer(**{**args, **kwargs})


# Arguments that cannot be meant --------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"device_train_microbatch_size": True}, "device_train_microbatch_size"),
        ({"scale_schedule_ratio": True}, "scale_schedule_ratio=True"),
        ({"scale_schedule_ratio": float("inf")}, "scale_schedule_ratio=inf"),
        ({"scale_schedule_ratio": 1e-9}, r"scale_schedule_ratio=1e-09 scales max_duration=2ep to 0ep"),
        ({"save_num_checkpoints_to_keep": -5}, "save_num_checkpoints_to_keep=-5"),
        ({"autoresume": "yes"}, "`autoresume`='yes' must be True or False"),
        ({"progress_bar": "no"}, "`progress_bar`='no' must be True or False"),
        ({"deterministic_mode": "no"}, "`deterministic_mode`='no'"),
        ({"compute_train_metrics": "yes"}, "`compute_train_metrics`='yes'"),
        ({"save_overwrite": 1}, "`save_overwrite`=1"),
        ({"eval_interval": lambda: True}, r"`eval_interval`=<lambda> \(function\) must be a callable \(state, event\)"),
        ({"max_duration": "abc"}, "max_duration='abc' is not a time"),
        ({"max_duration": "10 epochs"}, "max_duration='10 epochs' is not a time"),
        ({"seed": "abc"}, "seed='abc' must be an int"),
        ({"seed": 2**70}, "seed=1180591620717411303424 must be an int in"),
        ({"nonfinite_loss": "ignore"}, "`nonfinite_loss`='ignore' must be one of 'error', 'skip'"),
        ({"run_name": 5}, "run_name=5 must be a string"),
        ({"load_path": 3}, "load_path=3 must be a path"),
    ],
)
def test_arguments_that_cannot_be_meant_are_refused_naming_them(kwargs: dict, words: str) -> None:
    with pytest.raises((TypeError, ValueError), match=words):
        _trainer(**kwargs)


@pytest.mark.timeout(60)
def test_a_token_duration_on_data_without_tokens_is_refused_before_any_step() -> None:
    trainer = _trainer(max_duration="10tok")
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    with pytest.raises(ValueError, match=r"max_duration=10tok counts tokens, but the training batches hold none"):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))


# NaN and infinite losses ---------------------------------------------------------------------
class NaNLossAt(Callback):
    """Turns the loss of one step into NaN (as an exploding loss would)."""

    def __init__(self, step: int):
        self.step = step

    def after_loss(self, state, logger) -> None:
        if state.timestamp.batch + 1 == self.step:
            state.loss = state.loss * float("nan")


def test_a_nan_loss_stops_the_run_naming_the_step_and_the_logger_records_failed(tmp_path: Path) -> None:
    recorder = StatusRecorder()
    trainer = _trainer(callbacks=[NaNLossAt(3)], loggers=[recorder], save_folder=tmp_path, save_interval="1ba")
    with pytest.raises(NonFiniteLossError, match=r"the training loss is nan at step 3\b"):
        trainer.fit()
    assert recorder.finished == [("FAILED", "NonFiniteLossError")]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ep0-ba1.pt", "ep0-ba2.pt"]  # none after it
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())  # the bad step never applied


def test_a_nan_in_the_inputs_stops_the_run() -> None:
    with pytest.raises(NonFiniteLossError, match="at step 2"):
        _trainer(_data(poison_at=5)).fit()  # sample 5 is in the second batch of 4


def test_skip_mode_skips_bad_steps_counts_them_and_warns_once() -> None:
    logger = InMemoryLogger()
    trainer = _trainer(_data(poison_at=5), nonfinite_loss="skip", loggers=[logger])
    with pytest.warns(RuntimeWarning, match="at step 2; the step is skipped"):
        trainer.fit()  # 2 epochs: the poisoned batch comes twice
    assert trainer._nonfinite.skipped == 2
    assert logger.steps_and_values("trainer/nonfinite_skips") == ([2, 6], [1, 2])
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())


def test_on_accelerators_losses_are_read_back_in_batches_and_the_first_bad_step_is_named() -> None:
    guard = NonFiniteLossGuard("error", check_every=4, read_every_step=False)  # the accelerator path
    losses = [torch.tensor(1.0), torch.tensor(float("inf")), torch.tensor(float("nan"))]
    for step, loss in enumerate(losses, start=1):
        assert guard.observe(loss, step)  # nothing is read yet: no host sync per step
    with pytest.raises(NonFiniteLossError, match=r"is inf at step 2 \(found at a periodic check"):
        guard.check()
    guard.check()  # each loss is read once


def test_a_kept_loss_holds_no_graph_and_a_detached_one_is_kept_as_is() -> None:
    guard = NonFiniteLossGuard("error", read_every_step=False)
    weight = torch.ones((), requires_grad=True)
    detached = torch.tensor(2.0)
    assert guard.observe(weight * 3, 1) and guard.observe(detached, 2)
    (_, with_graph), (_, kept) = guard._pending
    assert not with_graph.requires_grad and float(with_graph) == 3.0
    assert kept is detached  # the Trainer's loss is already detached: no operation per step
    guard.check()


def test_an_empty_eval_loader_is_an_error_not_a_zero_accuracy() -> None:
    empty = DataLoader(TensorDataset(torch.randn(3, 4), torch.zeros(3, dtype=torch.long)), batch_size=4, drop_last=True)
    with pytest.raises(ValueError, match="eval_dataloader yielded no batches"):
        _trainer(max_duration="1ba").eval(empty)


# How a run ends --------------------------------------------------------------------------------
class Explode(Callback):
    def batch_end(self, state, logger) -> None:
        if state.timestamp.batch == 2:
            raise RuntimeError("boom")


def test_a_finished_run_is_finished_once_by_close() -> None:
    recorder = StatusRecorder()
    trainer = _trainer(loggers=[recorder])
    trainer.fit()
    assert recorder.finished == []  # fit may be called again
    trainer.close()
    trainer.close()
    assert recorder.finished == [("FINISHED", None)]


def test_a_failed_run_is_failed_once_and_close_does_not_finish_it_again() -> None:
    recorder = StatusRecorder()
    trainer = _trainer(callbacks=[Explode()], loggers=[recorder])
    with pytest.raises(Exception, match="boom"):
        trainer.fit()
    trainer.close()
    assert recorder.finished == [("FAILED", "MethodError")]


def test_a_failure_while_the_trainer_is_built_is_recorded(tmp_path: Path) -> None:
    recorder = StatusRecorder()
    damaged = tmp_path / "ep0-ba1.pt"
    damaged.write_bytes(b"PK\x03\x04 and then nothing")
    with pytest.raises(ckpt.CheckpointError):
        _trainer(loggers=[recorder], load_path=damaged)
    assert recorder.finished == [("FAILED", "CheckpointError")]


CHILD = textwrap.dedent(
    """
    import signal
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from cadence import Callback, LoggerDestination, Trainer

    # Python raises KeyboardInterrupt on SIGINT only if SIGINT was not ignored when it started; a test
    # runner's worker may pass an ignored SIGINT down to this child, so restore Python's own handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from cadence.testing import mlp_classifier

    status_file, started_file = sys.argv[1], sys.argv[2]

    class StatusFile(LoggerDestination):
        def finish(self, status="FINISHED", error=None):
            with open(status_file, "a") as handle:
                handle.write(f"{status} {type(error).__name__ if error else None}\\n")

    class Started(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch == 3:
                open(started_file, "w").close()

    model = mlp_classifier(4, 2)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = Trainer(model=model, train_dataloader=DataLoader(data, batch_size=4), max_duration="100000ba",
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.1), callbacks=[Started()],
                      loggers=[StatusFile()], progress_bar=False, seed=0)
    trainer.fit()
    """
)


# SIGTERM: exit code 143, what a SIGTERM death reports; SIGINT: Python re-raises it on exit (-2)
@pytest.mark.parametrize(
    ("signum", "exit_code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)]
)
def test_a_process_told_to_stop_records_its_run_as_killed(tmp_path: Path, signum: int, exit_code: int) -> None:
    status, started = tmp_path / "status", tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(status), str(started)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert child.poll() is None, child.communicate()[1].decode()
        assert time.monotonic() < deadline, "the child never started training"
        time.sleep(0.05)
    os.kill(child.pid, signum)
    child.communicate(timeout=60)
    expected = "RunTerminated" if signum == signal.SIGTERM else "KeyboardInterrupt"
    assert status.read_text().splitlines() == [f"KILLED {expected}"]  # exactly once, with the right status
    assert child.returncode == exit_code


def test_nonfinite_guard_values_are_what_the_message_says() -> None:
    error = NonFiniteLossError(7, math.inf)
    assert (error.step, error.value) == (7, math.inf) and "inf at step 7" in str(error)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: _trainer(max_duration="abc"), "max_duration"),
        (lambda: _trainer(eval_interval="abc", eval_dataloader=DataLoader(_data(), batch_size=4)), "eval_interval"),
        (lambda: _trainer(save_interval="abc"), "save_interval"),
        (lambda: State(model=mlp_classifier(4, 2), max_duration="abc"), "max_duration"),
        (lambda: schedulers.CosineAnnealingScheduler(t_max="abc"), "t_max"),
        (lambda: schedulers.LinearWithWarmupScheduler(t_warmup="x"), "t_warmup"),
        (lambda: schedulers.StepScheduler(step_size="1.5ep"), "step_size"),
        (lambda: schedulers.MultiStepScheduler(["1ep", "x"]), r"milestones\[1\]"),
        (lambda: schedulers.MultiStepScheduler("30ep"), "milestones"),
        (lambda: schedulers.StepScheduler("1ep", gamma=float("nan")), "gamma"),
        (lambda: schedulers.ConstantScheduler(alpha="1"), "alpha"),
    ],
)
def test_times_and_schedules_that_cannot_be_parsed_name_their_argument(build, name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        build()
