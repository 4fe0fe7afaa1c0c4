"""The run clock: evaluation and warm-up stay out of training time; time-to-target is read at evaluations."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, Classifier, Trainer
from cadence_harness.running.timing import RunTimer


class SlowEval(Callback):
    """Sleeps at the start of every evaluation (after the timer has paused)."""

    def eval_start(self, state: Any, logger: Any) -> None:
        time.sleep(0.2)


class SlowEvalSetUp(Callback):
    """Sleeps at the evaluation's first event, before EVAL_START (as building its metrics could)."""

    def eval_before_all(self, state: Any, logger: Any) -> None:
        time.sleep(0.2)


def train(timer: RunTimer, batches: int = 4, slow: Callback | None = None, close: bool = True) -> Trainer:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    model = Classifier(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), 2)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        eval_dataloader=DataLoader(data, batch_size=8),
        eval_interval="2ba",
        max_duration=f"{batches}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=[timer, slow or SlowEval()],
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    if close:
        trainer.close()
    return trainer


def test_evaluation_is_not_training_time() -> None:
    timer = RunTimer("MulticlassAccuracy", target=None)
    train(timer)
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/eval_s"] >= 0.4  # two evaluations of at least 0.2 s
    assert summary["final/train_s"] < summary["final/wall_s"] - 0.39
    assert summary["final/samples_per_s"] == 16 / summary["final/train_s"]
    assert [batch for batch, _, _ in timer.history] == [2, 4]
    assert "final/time_to_target_s" not in summary and summary["final/peak_memory_mb"] > 0


def test_all_of_an_evaluation_is_evaluation_time_from_its_first_event_to_its_last() -> None:
    timer = RunTimer("MulticlassAccuracy", target=None)
    train(timer, slow=SlowEvalSetUp())
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/eval_s"] >= 0.4  # two evaluations, each slept 0.2 s at EVAL_BEFORE_ALL
    assert summary["final/train_s"] < summary["final/wall_s"] - 0.39


def test_a_standalone_evaluation_is_timed_too() -> None:
    timer = RunTimer("MulticlassAccuracy", target=None)
    trainer = train(timer, close=False)
    before = timer.eval_s
    trainer.eval()
    trainer.close()
    assert timer.eval_s >= before + 0.2


def test_time_to_target_is_the_training_time_of_the_first_evaluation_that_reaches_it() -> None:
    timer = RunTimer("MulticlassAccuracy", target=0.0)
    train(timer)
    _, first_train_s, _ = timer.history[0]
    assert timer.time_to_target_s == first_train_s
    assert timer.summary(torch.device("cpu"))["final/reached_target"] == 1.0


def test_warmup_batches_are_timed_apart() -> None:
    timer = RunTimer("MulticlassAccuracy", target=None, warmup_batches=1)
    train(timer)
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/warmup_s"] > 0
    assert summary["final/samples_per_s"] == 12 / summary["final/train_s"]  # 3 measured batches of 4


class SlowCounting(Callback):
    """Stands in for the FLOP counter's slow first pass: starts counting a new piece of work (and sleeps) in the
    third batch, telling the timer as `FlopCounter` does (``on_count``)."""

    def __init__(self, on_count: Any) -> None:
        self.on_count = on_count

    def before_forward(self, state: Any, logger: Any) -> None:
        if state.timestamp.batch == 2:
            self.on_count()
            time.sleep(0.3)


def test_a_batch_during_which_work_is_counted_is_timed_apart_as_a_shape_warmup(linear_fit: Any) -> None:
    timer = RunTimer("MulticlassAccuracy", target=None)
    linear_fit([timer, SlowCounting(timer.time_apart)], evaluate=False)
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/shape_warmups"] == 1
    assert summary["final/warmup_s"] >= 0.3 > summary["final/train_s"]  # the sleep left the timed region
    assert summary["final/samples_per_s"] == 12 / summary["final/train_s"]  # the other 3 batches of 4


class BusyOtherThread(Callback):
    """Keeps a second thread spinning on the CPU during every training batch (the training thread waits)."""

    def batch_start(self, state: Any, logger: Any) -> None:
        import threading

        def spin() -> None:  # 0.05 s of this thread's CPU time, however busy the machine is
            end = time.thread_time() + 0.05
            while time.thread_time() < end:
                pass

        worker = threading.Thread(target=spin)
        worker.start()
        worker.join()


def test_the_training_threads_cpu_time_excludes_other_threads_work(linear_fit: Any) -> None:
    timer = RunTimer("MulticlassAccuracy", target=None)
    linear_fit([timer, BusyOtherThread()], evaluate=False)
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/cpu_s"] >= 0.19  # the process: four 0.05 s spins of the other thread
    assert summary["final/main_thread_cpu_s"] < summary["final/cpu_s"] - 0.1  # the training thread only waited


def test_the_machine_probe_reads_the_host_load_at_evaluations_and_at_the_end(monkeypatch: Any) -> None:
    from cadence_harness.running import machine_probe
    from cadence_harness.running.machine_probe import MachineProbe, host_load

    repeats: list[int] = []
    timed = machine_probe.host_speed_us
    monkeypatch.setattr(machine_probe, "host_speed_us", lambda n: repeats.append(n) or timed(n))
    timer = RunTimer("MulticlassAccuracy", target=None)
    train(timer)
    assert repeats == [1, 1, 5]  # an evaluation's speed reading is one timing; the end's the best of five
    assert timer.probe is not None and len(timer.probe.loads) == 3  # 2 evaluations + the end of fit
    load = host_load()
    assert load == -1.0 or 0 <= load < 1000
    summary = timer.summary(torch.device("cpu"))
    assert summary.get("final/host_load", 0.0) == max(timer.probe.loads)
    assert len(timer.probe.speeds_us) == 3 and summary["final/host_speed_us"] == sorted(timer.probe.speeds_us)[1]
    if os.path.exists("/proc/stat"):
        assert 0.0 <= summary["final/host_steal_frac"] <= 1.0
    assert not any(key.startswith("final/gpu_") for key in summary)  # no GPU readings on the CPU
    probe = MachineProbe(torch.device("cpu"), loads=[0.2, -1.0], gpu=[(1980.0, 50.0, 300.0), (1500.0, 70.0, 500.0)])
    assert probe.summary() == {
        "final/host_load": 0.2,
        "final/gpu_sm_clock_min_mhz": 1500.0,
        "final/gpu_temperature_max_c": 70.0,
        "final/gpu_power_mean_w": 400.0,
    }


def test_the_host_steal_share_is_the_steal_ticks_over_all_ticks_between_the_fits_start_and_the_last_reading(
    tmp_path: Any,
) -> None:
    from cadence_harness.running.machine_probe import MachineProbe, steal_ticks

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\n")
    assert steal_ticks(str(stat)) == (35, 1000)
    stat.write_text("intr 1 2 3\n")
    assert steal_ticks(str(stat)) is None
    assert steal_ticks(str(tmp_path / "missing")) is None
    probe = MachineProbe(torch.device("cpu"), steal_at_start=(35, 1000), steal_at_end=(95, 1400))
    assert probe.summary() == {"final/host_steal_frac": 60 / 400}
    assert "final/host_steal_frac" not in MachineProbe(torch.device("cpu"), steal_at_start=None).summary()


def test_the_host_speed_reading_times_a_fixed_piece_of_python_work() -> None:
    """The best of the repeats, given per SPEED_UNIT iterations so that readings compare with records made when
    all 20,000 were timed."""
    from cadence_harness.running import machine_probe

    assert 0 < machine_probe.host_speed_us(repeats=1) < 1e6
    readings = iter([0.0, 3e-4, 1.0, 1.0 + 2e-4, 2.0, 2.0 + 5e-4])  # three repeats: 300, 200, 500 us
    best = machine_probe.host_speed_us(repeats=3, clock=lambda: next(readings))
    assert abs(best - 200 * machine_probe.SPEED_UNIT / machine_probe.SPEED_WORK) < 1e-6


class SlowSamples(torch.utils.data.Dataset):
    """16 samples of a 4-feature problem, each read in 10 ms (a loader that cannot keep up)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(16, 4, generator=generator), torch.randint(0, 2, (16,), generator=generator)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.01)
        return self.x[index], self.y[index]


def test_a_run_that_waits_for_its_data_is_called_data_bound() -> None:
    from cadence_harness.running.timing import data_bound_warning

    timer = RunTimer()
    model = Classifier(torch.nn.Linear(4, 2), 2)
    Trainer(
        model=model,
        train_dataloader=DataLoader(SlowSamples(), batch_size=4),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=[timer],
        progress_bar=False,
        seed=0,
    ).fit()
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/data_wait_frac"] > 0.5  # 40 ms of reading per batch against a 4x2 linear step
    warning = data_bound_warning(summary, "slow-s0")
    assert warning is not None and warning.startswith("warning: slow-s0 waited for its batches")
    assert data_bound_warning({"final/data_wait_frac": 0.2}, "fast-s0") is None  # at most a fifth: not called so


def test_a_harness_run_says_when_it_was_data_bound(
    tiny_recipe: Any, tracking_uri: str, monkeypatch: Any, capsys: Any
) -> None:
    from cadence_harness.running import run, timing
    from cadence_harness.running.runspec import RunSpec

    summary = timing.RunTimer.summary
    monkeypatch.setattr(
        timing.RunTimer, "summary", lambda self, device: {**summary(self, device), "final/data_wait_frac": 0.6}
    )
    run.execute(RunSpec(tiny_recipe(), (), 0), tracking_uri=tracking_uri, progress_bar=False)
    assert "waited for its batches 60% of its run (above 20%)" in capsys.readouterr().err
