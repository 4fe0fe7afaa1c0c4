"""The writer process: a local store's MLflow calls run in a child, off the training process's GIL.

Against real MLflow and a real SQLite store; nothing is mocked. The in-process store class is wrapped
only to count whether this process wrote the points itself.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow", reason="the MLflow logger's tests need mlflow (pip install mlflow)")

from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from cadence_mlflow import MLFlowLogger  # noqa: E402
from cadence_mlflow.tracking import classify  # noqa: E402
from cadence_mlflow.writer import WriterClient, is_local_store, writes_out_of_process  # noqa: E402

FAST = {"flush_interval_s": 0.05, "max_backoff_s": 0.5}


def _log_run(uri: str, spill: Path, out_of_process: bool | None, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A logger's run of 200 steps; returns its run id and how many `log_batch` calls this process's store made."""
    calls = []
    original = SqlAlchemyStore.log_batch

    def counted(self: SqlAlchemyStore, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", counted)
    logger = MLFlowLogger("writer", tracking_uri=uri, spill_dir=spill, out_of_process=out_of_process, **FAST)
    logger.log_hyperparameters({"lr": 0.1})
    for step in range(200):
        logger.log_metrics({"loss": 1.0 / (step + 1)}, step)
    logger.finish()
    monkeypatch.setattr(SqlAlchemyStore, "log_batch", original)
    return str(logger.run_id), len(calls)


def test_a_local_store_is_written_by_the_child_and_gets_every_point(
    sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, in_process = _log_run(sqlite_uri, tmp_path / "spill", True, monkeypatch)
    assert in_process == 0  # no point was written by this process
    client = MlflowClient(sqlite_uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss"))
    assert history == [(s, 1.0 / (s + 1)) for s in range(200)]
    assert not (tmp_path / "spill" / "spill.db").exists()  # nothing had to be spilled
    # out_of_process=False keeps the writes in this process (the control: the count above can fail)
    run_id, in_process = _log_run(sqlite_uri, tmp_path / "spill", False, monkeypatch)
    assert in_process > 0 and len(client.get_metric_history(run_id, "loss")) == 200


def test_the_childs_errors_are_classified_as_the_originals_were(sqlite_uri: str) -> None:
    local = MlflowClient(sqlite_uri)
    run_id = local.create_run(local.create_experiment("errors")).info.run_id
    local.log_param(run_id, "lr", "0.5")
    remote = WriterClient(sqlite_uri)
    remote.log_batch(run_id, metrics=[Metric("loss", 0.25, 0, 3)])
    assert [(m.step, m.value) for m in local.get_metric_history(run_id, "loss")] == [(3, 0.25)]
    with pytest.raises(mlflow.exceptions.MlflowException) as refused:  # a param cannot change: its content
        remote.log_batch(run_id, params=[Param("lr", "0.1")])
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE" and classify(refused.value) == "item"
    with pytest.raises(mlflow.exceptions.MlflowException) as gone:  # the run is not there
        remote.set_terminated("0" * 32, "FINISHED")
    assert classify(gone.value) == "run"
    with pytest.raises(AttributeError, match="makes only log_batch"):
        remote.delete_run(run_id)


def test_a_dead_writer_is_started_again_at_the_next_call(sqlite_uri: str) -> None:
    local = MlflowClient(sqlite_uri)
    run_id = local.create_run(local.create_experiment("restart")).info.run_id
    remote = WriterClient(sqlite_uri)
    remote.log_batch(run_id, metrics=[Metric("loss", 1.0, 0, 0)])
    child = remote._writer._child
    assert child is not None
    child.process.kill()
    child.process.wait(timeout=30)
    started = time.monotonic()
    remote.log_batch(run_id, metrics=[Metric("loss", 0.5, 0, 1)])
    assert remote._writer._child is not None and remote._writer._child.process.pid != child.process.pid
    assert sorted((m.step, m.value) for m in local.get_metric_history(run_id, "loss")) == [(0, 1.0), (1, 0.5)]
    assert time.monotonic() - started < 60


def test_by_default_a_local_store_is_written_from_the_child_on_a_cuda_machine_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the training thread needs the GIL between launches; on a CPU-only machine a thread costs the same
    CPU without the child's start-up. What is asked for is always done."""
    import torch

    for cuda in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        assert writes_out_of_process(None, "sqlite:////tmp/m.db") is cuda
        assert writes_out_of_process(None, "http://127.0.0.1:5000") is False  # the server's own process writes
        assert writes_out_of_process(True, "http://127.0.0.1:5000") and not writes_out_of_process(False, "mlruns")


def test_which_stores_the_client_writes_itself() -> None:
    for uri in ("sqlite:////tmp/m.db", "file:///tmp/mlruns", "mlruns", "postgresql+psycopg2://u@h/db", "mysql://h/d"):
        assert is_local_store(uri), uri
    for uri in ("http://127.0.0.1:5000", "https://mlflow.example.com", "databricks"):
        assert not is_local_store(uri), uri
    with pytest.raises(TypeError, match="out_of_process='yes' must be True, False or None"):
        MLFlowLogger(tracking_uri="sqlite:////tmp/never.db", out_of_process="yes")  # type: ignore[arg-type]


def test_asking_for_the_child_where_it_cannot_run_fails_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "name", "nt")  # the child inherits its pipes by pass_fds: POSIX only
    with pytest.raises(ValueError, match="out_of_process=True needs a POSIX system"):
        MLFlowLogger(tracking_uri="sqlite:////tmp/never.db", out_of_process=True)
    assert not writes_out_of_process(None, "sqlite:////tmp/never.db")  # and the default never asks for it there
