"""cadence.callbacks, checked against Composer's documented behaviour: LRMonitor, SpeedMonitor,
MemoryMonitor, EarlyStopper (and Lightning's EarlyStopping arguments)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

from cadence import Callback, InMemoryLogger, Logger, State, Trainer
from cadence.callbacks import EarlyStopper, EarlyStopping, LRMonitor, MemoryMonitor, SpeedMonitor
from cadence.callbacks import speed_monitor as speed_module
from cadence.callbacks.memory_monitor import DEFAULT_MEMORY_KEYS
from cadence.engine import MethodError
from cadence.schedulers import LinearScheduler
from cadence.testing import digits_datasets, mlp_classifier
from cadence.time import Time, Timestamp, TimeUnit


@pytest.fixture
def digits_loaders() -> tuple[DataLoader, DataLoader]:
    """A small slice of sklearn's digits: 10 training batches of 32 per epoch, one evaluation batch."""
    train, test = digits_datasets()
    return DataLoader(Subset(train, range(320)), batch_size=32), DataLoader(Subset(test, range(100)), batch_size=100)


def _series(memory: InMemoryLogger, name: str) -> tuple[list[int], list[Any]]:
    """(steps, values) of one metric (``steps_and_values`` where InMemoryLogger has Composer's get_timeseries)."""
    read = memory.steps_and_values
    return read(name)


def _digits_trainer(digits_loaders, callbacks, logger: InMemoryLogger | None = None, **kwargs: Any) -> Trainer:
    train, test = digits_loaders
    torch.manual_seed(0)
    model = mlp_classifier()
    options: dict[str, Any] = {"max_duration": "10ep", "seed": 0, "eval_dataloader": test}
    options.update(kwargs)
    return Trainer(
        model=model,
        train_dataloader=train,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=callbacks,
        loggers=[logger or InMemoryLogger()],
        device="cpu",
        progress_bar=False,
        **options,
    )


# LRMonitor --------------------------------------------------------------------------------------
def test_lr_monitor_logs_every_group_of_every_optimizer_under_composer_keys() -> None:
    model = torch.nn.Linear(2, 2)
    sgd = torch.optim.SGD([{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 0.01}])
    adam = torch.optim.Adam(model.parameters(), lr=3e-4)
    state = State(model=model, optimizers=[sgd, adam])
    memory = InMemoryLogger()
    state.timestamp = Timestamp(batch=7)
    LRMonitor().batch_end(state, Logger(state, [memory]))
    assert memory.most_recent_values == {"lr-SGD/group0": 0.1, "lr-SGD/group1": 0.01, "lr-Adam/group0": 3e-4}
    assert _series(memory, "lr-SGD/group1")[0] == [7]  # at the current batch


def test_lr_monitor_in_a_run_logs_the_scheduled_rate_of_the_next_batch() -> None:
    torch.manual_seed(0)
    model = mlp_classifier(in_features=4, num_classes=2, hidden=4)
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    monitor = LRMonitor()
    values: list[float] = []

    class Spy(Callback):  # what LRMonitor logs, captured apart from the trainer's own lr logging
        def batch_end(self, state: State, logger: Logger) -> None:
            spy = InMemoryLogger()
            monitor.batch_end(state, Logger(state, [spy]))
            values.append(spy.most_recent_values["lr-SGD/group0"])

    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=10),
        max_duration="8ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=1.0),
        schedulers=LinearScheduler(alpha_i=1.0, alpha_f=0.0, t_max="8ba"),
        callbacks=[Spy()],
        device="cpu",
        progress_bar=False,
    ).fit()
    assert values == pytest.approx([1 - step / 8 for step in range(1, 9)])  # stepped before BATCH_END


# SpeedMonitor -----------------------------------------------------------------------------------
class _Clock:
    """perf_counter that advances a fixed tick per call: every timed span is exactly one tick."""

    def __init__(self, tick: float):
        self._now = itertools.count(step=tick)

    def perf_counter(self) -> float:
        return float(next(self._now))


def test_speed_monitor_logs_throughput_once_the_window_is_full(digits_loaders, monkeypatch) -> None:
    monkeypatch.setattr(speed_module, "time", _Clock(0.25))  # each batch and each evaluation takes 0.25 s
    memory = InMemoryLogger()
    trainer = _digits_trainer(
        digits_loaders, [SpeedMonitor(window_size=3, time_unit="seconds")], memory, max_duration="5ba", eval_interval=0
    )
    trainer.fit()
    steps, batches_per_sec = _series(memory, "throughput/batches_per_sec")
    assert steps == [3, 4, 5]  # BATCH_END of every batch once 3 are timed
    assert batches_per_sec == pytest.approx([4.0] * 3)
    assert _series(memory, "throughput/samples_per_sec")[1] == pytest.approx([128.0] * 3)  # 32 per batch
    assert _series(memory, "throughput/device/samples_per_sec")[1] == pytest.approx([128.0] * 3)
    assert "throughput/tokens_per_sec" not in memory.data  # (x, y) batches hold no tokens
    steps, train_time = _series(memory, "time/train")
    assert steps == [1, 2, 3, 4, 5] and train_time == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])
    assert _series(memory, "time_seconds/train")[1] == train_time
    assert _series(memory, "time/secs_per_step")[1] == pytest.approx([0.25] * 5)


def test_speed_monitor_counts_evaluation_apart_and_in_hours(digits_loaders, monkeypatch) -> None:
    monkeypatch.setattr(speed_module, "time", _Clock(36.0))
    memory = InMemoryLogger()
    monitor = SpeedMonitor(window_size=100)  # Composer's defaults: 100 batches, hours
    _digits_trainer(digits_loaders, [monitor], memory, max_duration="4ba", eval_interval="2ba").fit()
    values = memory.most_recent_values
    assert values["time/train"] == pytest.approx(4 * 0.01)  # 4 batches of 36 s
    assert values["time/val"] == pytest.approx(0.01)  # one evaluation logged before the 4th BATCH_END
    assert values["time/total"] == pytest.approx(values["time/train"] + values["time/val"])
    assert "throughput/batches_per_sec" not in memory.data  # the window of 100 never filled
    assert monitor.state_dict() == pytest.approx({"total_train_s": 144.0, "total_eval_s": 72.0})


def test_speed_monitor_logs_flops_and_mfu_when_the_model_counts_flops(digits_loaders, monkeypatch) -> None:
    monkeypatch.setattr(speed_module, "time", _Clock(0.5))
    memory = InMemoryLogger()
    trainer = _digits_trainer(
        digits_loaders, [SpeedMonitor(window_size=2, gpu_flops_available=1000.0)], memory, max_duration="3ba"
    )
    trainer.state.model.flops_per_batch = lambda batch: 100.0 * len(batch[0])  # 3200 per batch of 32
    trainer.fit()
    assert _series(memory, "throughput/flops_per_sec")[1] == pytest.approx([6400.0, 6400.0])
    assert _series(memory, "throughput/device/mfu")[1] == pytest.approx([6.4, 6.4])


def test_speed_monitor_state_round_trips_and_arguments_are_checked() -> None:
    monitor = SpeedMonitor()
    monitor.load_state_dict({"total_train_s": 12.5, "total_eval_s": 2.0})
    assert monitor.state_dict() == {"total_train_s": 12.5, "total_eval_s": 2.0}
    with pytest.raises(ValueError, match="window_size"):
        SpeedMonitor(window_size=0)
    with pytest.raises(ValueError, match="hours"):
        SpeedMonitor(time_unit="hour")
    with pytest.raises(ValueError, match="gpu_flops_available"):
        SpeedMonitor(gpu_flops_available=-1)


# MemoryMonitor ----------------------------------------------------------------------------------
def test_memory_monitor_on_cpu_logs_the_host_process_memory_every_batch(digits_loaders) -> None:
    memory = InMemoryLogger()
    _digits_trainer(digits_loaders, [MemoryMonitor()], memory, max_duration="3ba", eval_interval=0).fit()
    steps, peak = _series(memory, "memory/host/peak_rss_gb")
    assert steps == [0, 1, 2]  # AFTER_TRAIN_BATCH, before the batch counter moves on
    assert all(0.01 < value < 4096 for value in peak)  # this process: tens of MB at least, less than 4 TB
    assert peak == sorted(peak)  # a peak never decreases
    assert not any(key.startswith("memory/current_") for key in memory.data)  # no CUDA stats on a CPU run
    try:
        import psutil  # noqa: F401
    except ImportError:
        assert "memory/host/rss_gb" not in memory.data
    else:
        assert 0 < memory.most_recent_values["memory/host/rss_gb"] <= peak[-1] * 1.01


def test_memory_monitor_on_cuda_reports_memory_stats_in_gigabytes(monkeypatch) -> None:
    stats = {"allocated_bytes.all.current": 2_500_000_000, "reserved_bytes.all.peak": 4e9, "num_alloc_retries": 3}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: stats)
    report = MemoryMonitor()._cuda_report(torch.device("cuda", 0))
    assert set(report) == {f"memory/{name}" for name in DEFAULT_MEMORY_KEYS.values()}
    assert report["memory/current_allocated_mem"] == 2.5
    assert report["memory/peak_reserved_mem"] == 4.0
    assert report["memory/alloc_retries"] == 3  # a count, not bytes
    assert report["memory/current_active_mem"] == 0  # absent from the stats: 0
    custom = MemoryMonitor(memory_keys={"reserved_bytes.all.peak": "peak_reserved"})._cuda_report(torch.device("cuda"))
    assert custom == {"memory/peak_reserved": 4.0}
    with pytest.raises(TypeError, match="memory_keys"):
        MemoryMonitor(memory_keys=["allocated_bytes.all.current"])  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_memory_monitor_on_a_real_gpu(digits_loaders) -> None:
    memory = InMemoryLogger()
    trainer = _digits_trainer(digits_loaders, [MemoryMonitor()], memory, max_duration="2ba", eval_interval=0)
    trainer.state.device = torch.device("cuda")  # the monitor reads the device from the state
    trainer.state.model.cuda()
    torch.empty(1024, device="cuda")
    MemoryMonitor().after_train_batch(trainer.state, trainer.logger)
    assert memory.most_recent_values["memory/peak_allocated_mem"] > 0


# EarlyStopper -----------------------------------------------------------------------------------
class _Scripted:
    """A metric whose compute() returns the next scripted value."""

    def __init__(self, values: list[float]):
        self._values = iter(values)
        self.update_count = 1

    def compute(self) -> torch.Tensor:
        return torch.tensor(next(self._values))


def _stop_epoch(stopper: EarlyStopper, values: list[float]) -> int | None:
    """Drive `stopper` with one evaluation per epoch of 10 batches; the epoch the run stops at, or None."""
    state = State(model=torch.nn.Linear(1, 1), max_duration="100ep")
    state.eval_metrics = {"acc": _Scripted(values)}  # type: ignore[dict-item]
    logger = Logger(state)
    stopper.fit_start(state, logger)
    for epoch in range(1, len(values) + 1):
        state.timestamp = Timestamp(epoch=epoch, batch=10 * epoch)
        stopper.eval_end(state, logger)
        if state.is_done():
            assert state.max_duration == Time(10 * epoch, TimeUnit.BATCH)  # stops at the batches done
            return epoch
    return None


def test_early_stopper_patience_counts_time_since_the_best_value_strictly() -> None:
    # best at epoch 2; epoch 3 is 1 epoch later (not more than patience=1), epoch 4 is 2: stop
    assert _stop_epoch(EarlyStopper("acc", "eval", patience=1), [0.5, 0.6, 0.6, 0.6, 0.6]) == 4
    assert _stop_epoch(EarlyStopper("acc", "eval", patience=2), [0.5, 0.6, 0.6, 0.6, 0.6]) == 5
    assert _stop_epoch(EarlyStopper("acc", "eval", patience=1), [0.5, 0.6, 0.7, 0.8, 0.9]) is None
    # min_delta: 0.65 beats 0.5 by more than 0.1 (best at epoch 2); 0.7 and 0.75 do not beat 0.65 by more
    assert _stop_epoch(EarlyStopper("acc", "eval", min_delta=0.1, patience=1), [0.5, 0.65, 0.7, 0.74]) == 4
    assert _stop_epoch(EarlyStopper("acc", "eval", comp="less", patience=1), [0.5, 0.6, 0.7]) == 3
    assert _stop_epoch(EarlyStopper("acc", "eval", comp=torch.less, patience=1), [0.5, 0.4, 0.3]) is None
    assert _stop_epoch(EarlyStopper("acc", "eval", patience="20ba"), [0.5, 0.6, 0.6, 0.6, 0.6]) == 5


def test_early_stopper_default_comparison_follows_the_metric_name() -> None:
    assert EarlyStopper("CrossEntropy").comp(1.0, 2.0)  # lower is better for losses and entropies
    assert EarlyStopper("val_loss").comp(1.0, 2.0)
    assert EarlyStopper("MulticlassAccuracy").comp(2.0, 1.0)  # higher is better otherwise


def test_early_stopper_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"dataloader_label.*'eval'"):
        EarlyStopper("acc", "my_evaluator")
    with pytest.raises(ValueError, match="comp"):
        EarlyStopper("acc", comp="bigger")
    with pytest.raises(ValueError, match="patience"):
        EarlyStopper("acc", patience="0.5dur")
    with pytest.raises(TypeError, match="patience"):
        EarlyStopper("acc", patience=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        EarlyStopping("acc", mode="maximum")


def test_early_stopper_ends_a_real_run_after_the_eval_that_exhausts_patience(digits_loaders) -> None:
    memory = InMemoryLogger()
    stopper = EarlyStopper("MulticlassAccuracy", "eval", min_delta=1.0, patience=1)  # nothing improves by > 1
    trainer = _digits_trainer(digits_loaders, [stopper], memory)
    trainer.fit()
    assert (trainer.state.timestamp.epoch, trainer.state.timestamp.batch) == (3, 30)  # of max_duration=10ep
    assert _series(memory, "metrics/eval/MulticlassAccuracy")[0] == [10, 20, 30]
    assert stopper.best_at == (1, 10) and stopper.stopped_at_batch == 30


def test_early_stopper_with_batch_patience_stops_mid_epoch(digits_loaders) -> None:
    stopper = EarlyStopper("metrics/eval/CrossEntropy", min_delta=100.0, patience="8ba")
    trainer = _digits_trainer(digits_loaders, [stopper], eval_interval="5ba")
    trainer.fit()  # best at batch 5; 10 batches later (> 8) at the evaluation of batch 15, in epoch 1
    assert (trainer.state.timestamp.epoch, trainer.state.timestamp.batch) == (1, 15)


def test_early_stopper_on_train_metrics(digits_loaders) -> None:
    stopper = EarlyStopper("MulticlassAccuracy", "train", min_delta=1.0, patience=1)
    trainer = _digits_trainer(digits_loaders, [stopper], compute_train_metrics=True, eval_interval=0)
    trainer.fit()
    assert trainer.state.timestamp.epoch == 3
    untracked = _digits_trainer(digits_loaders, [EarlyStopper("MulticlassAccuracy", "train")], eval_interval=0)
    with pytest.raises(MethodError, match="compute_train_metrics=True"):
        untracked.fit()


def test_early_stopper_names_the_metrics_it_could_monitor(digits_loaders) -> None:
    trainer = _digits_trainer(digits_loaders, [EarlyStopper("Accuracy", "eval")])
    with pytest.raises(MethodError, match="CrossEntropy, MulticlassAccuracy"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0  # refused at FIT_START, before any training


def test_lightning_early_stopping_counts_checks_without_improvement(digits_loaders) -> None:
    assert _stop_epoch(EarlyStopping("acc", mode="max", patience=2), [0.5, 0.6, 0.6, 0.6]) == 4
    assert _stop_epoch(EarlyStopping("acc", mode="max", patience=1), [0.5, 0.6, 0.6]) == 3
    assert _stop_epoch(EarlyStopping("acc", mode="min", patience=1), [0.5, 0.4, 0.3]) is None
    trainer = _digits_trainer(digits_loaders, [EarlyStopping("CrossEntropy", min_delta=100.0, patience=2)])
    trainer.fit()
    assert trainer.state.timestamp.epoch == 3  # first check sets the best, two more without improvement


def test_early_stopper_resumes_exactly_from_a_checkpoint(digits_loaders, tmp_path: Path) -> None:
    def stopper() -> EarlyStopper:
        return EarlyStopper("MulticlassAccuracy", "eval", min_delta=1.0, patience=1)

    first = stopper()
    _digits_trainer(digits_loaders, [first], save_folder=tmp_path, save_interval="1ep").fit()
    assert first.stopped_at_batch == 30
    # From epoch 2 (before the stop) with a fresh stopper: its restored best (epoch 1) stops the run at epoch 3,
    # where a stopper starting afresh would take epoch 2 as its best and run until epoch 4.
    resumed = stopper()
    trainer = _digits_trainer(digits_loaders, [resumed], load_path=tmp_path / "ep2-ba20.pt")
    assert resumed.best_at == (1, 10) and resumed.best == first.best
    trainer.fit()
    assert trainer.state.timestamp.batch == 30
    # From the checkpoint written at the stop: the run stays stopped instead of training on to 10 epochs.
    after_stop = _digits_trainer(digits_loaders, [stopper()], load_path=tmp_path / "ep3-ba30.pt")
    after_stop.fit()
    assert after_stop.state.timestamp.batch == 30
