"""`InMemoryLogger` in Composer's shape: ``data`` holds ``(Timestamp, value)``, `get_timeseries` returns a
dict of arrays keyed by the metric and every time unit, ``most_recent_values``/``most_recent_timestamps``,
``log_table`` and the ``state`` attribute set on INIT."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import InMemoryLogger, Logger, LoggerDestination, State, Timestamp, Trainer
from cadence.testing import mlp_classifier


def _fitted(logger: InMemoryLogger, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    data = TensorDataset(torch.randn(12, 4), torch.randint(0, 2, (12,)))
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        eval_dataloader=DataLoader(data, batch_size=6),
        max_duration="2ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        loggers=[logger],
        device="cpu",
        progress_bar=False,
        seed=0,
        **kwargs,
    )
    trainer.fit()
    return trainer


def test_the_state_is_kept_on_init_and_data_holds_timestamps_and_values() -> None:
    logger = InMemoryLogger()
    trainer = _fitted(logger)
    assert logger.state is trainer.state
    losses = logger.data["loss/train/total"]
    assert [type(timestamp) for timestamp, _ in losses] == [Timestamp] * 6
    assert [(int(t.epoch), int(t.batch), int(t.batch_in_epoch), int(t.sample)) for t, _ in losses] == [
        (0, 1, 1, 4), (0, 2, 2, 8), (0, 3, 3, 12), (1, 4, 1, 16), (1, 5, 2, 20), (1, 6, 3, 24),
    ]  # fmt: skip
    assert all(torch.isfinite(torch.as_tensor(value)) for _, value in losses)
    evaluated = [(int(t.epoch), int(t.batch)) for t, _ in logger.data["metrics/eval/MulticlassAccuracy"]]
    assert evaluated == [(1, 3), (2, 6)]  # after each epoch
    trainer.close()


def test_get_timeseries_has_composers_keys_and_aligned_arrays() -> None:
    logger = InMemoryLogger()
    trainer = _fitted(logger)
    timeseries = logger.get_timeseries("loss/train/total")
    assert set(timeseries) == {"loss/train/total", *Timestamp().state_dict()}
    assert {"epoch", "batch", "sample", "token", "batch_in_epoch", "total_wct", "batch_wct"} <= set(timeseries)
    assert all(isinstance(values, np.ndarray) and len(values) == 6 for values in timeseries.values())
    assert timeseries["batch"].tolist() == [1, 2, 3, 4, 5, 6]
    assert timeseries["epoch"].tolist() == [0, 0, 0, 1, 1, 1]
    assert timeseries["sample"].tolist() == [4, 8, 12, 16, 20, 24]
    assert timeseries["loss/train/total"].dtype.kind == "f"
    assert timeseries["loss/train/total"].tolist() == [float(v) for _, v in logger.data["loss/train/total"]]
    assert np.all(np.diff(timeseries["total_wct"]) >= 0)  # wall-clock seconds as plain numbers
    trainer.close()


def test_most_recent_values_and_timestamps() -> None:
    logger = InMemoryLogger()
    trainer = _fitted(logger)
    assert logger.most_recent_values["loss/train/total"] == float(logger.data["loss/train/total"][-1][1])
    assert isinstance(logger.most_recent_values["loss/train/total"], float)  # read back as a Python number
    assert 0.0 <= logger.most_recent_values["metrics/eval/MulticlassAccuracy"] <= 1.0
    timestamps = logger.most_recent_timestamps
    assert set(timestamps) == set(logger.data)
    assert (int(timestamps["loss/train/total"].epoch), int(timestamps["loss/train/total"].batch)) == (1, 6)
    assert timestamps["metrics/eval/MulticlassAccuracy"] is trainer.state.timestamp  # after the last epoch ended
    trainer.close()


def test_a_stored_timestamp_does_not_move_with_the_run() -> None:
    state = State(model=mlp_classifier(4, 2))
    memory = InMemoryLogger()
    memory.init(state, Logger(state, [memory]))
    Logger(state, [memory]).log_metrics({"x": 1.0})
    state.timestamp = state.timestamp.to_next_batch(4)
    Logger(state, [memory]).log_metrics({"x": 2.0})
    assert [int(t.batch) for t, _ in memory.data["x"]] == [0, 1]


def test_without_a_trainer_the_timestamp_comes_from_the_step() -> None:
    memory = InMemoryLogger()
    logger = Logger(None, [memory])
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=7)
    ((timestamp, value),) = memory.data["loss"]
    assert float(value) == 0.5  # kept as logged (a detached tensor)
    assert timestamp == Timestamp(batch=7) and memory.state is None
    assert memory.get_timeseries("loss")["batch"].tolist() == [7]
    assert memory.get_timeseries("loss")["loss"].tolist() == [0.5]


def test_steps_and_values_keeps_the_step_each_value_was_logged_at() -> None:
    state = State(model=mlp_classifier(4, 2))
    memory = InMemoryLogger()
    memory.init(state, Logger(state, [memory]))
    logger = Logger(state, [memory])
    logger.log_metrics({"skips": 1}, step=2)  # an explicit step: not the timestamp's batch
    logger.log_metrics({"skips": torch.tensor(2)})
    assert memory.steps_and_values("skips") == ([2, 0], [1, 2])
    assert memory.get_timeseries("skips")["batch"].tolist() == [0, 0]  # Composer: the run's timestamp


def test_an_unknown_metric_names_the_logged_ones() -> None:
    memory = InMemoryLogger()
    Logger(None, [memory]).log_metrics({"b": 1, "a": 2}, step=0)
    for read in (memory.get_timeseries, memory.steps_and_values):
        with pytest.raises(ValueError, match=r"metric='c' was never logged; logged metrics: a, b"):
            read("c")


def test_log_table_keeps_json_in_pandas_split_orientation() -> None:
    memory = InMemoryLogger()
    logger = Logger(None, [memory, LoggerDestination()])  # a destination without tables is skipped
    logger.log_table(["method", "speed-up"], [["MixUp", 1.0], ["BlurPool", torch.tensor(1.5)]], name="results")
    assert json.loads(memory.tables["results"]) == {
        "columns": ["method", "speed-up"],
        "data": [["MixUp", 1.0], ["BlurPool", 1.5]],
    }
    logger.log_table(["a"], [[1]])
    assert json.loads(memory.tables["Table"]) == {"columns": ["a"], "data": [[1]]}  # Composer's default name


def test_log_table_refuses_a_row_that_does_not_fit_the_columns() -> None:
    memory = InMemoryLogger()
    with pytest.raises(ValueError, match=r"rows\[1\] has 1 values but there are 2 columns"):
        memory.log_table(["a", "b"], [[1, 2], [3]])


def test_hyperparameters_are_kept() -> None:
    logger = InMemoryLogger()
    trainer = _fitted(logger)
    assert logger.hyperparameters["seed"] == 0 and logger.hyperparameters["max_duration"] == "2ep"
    trainer.close()
