"""TensorboardLogger and WandBLogger, read back from the files they write (no network: W&B runs offline)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import InMemoryLogger, Trainer
from cadence.loggers import LoggerDestination
from cadence.testing import mlp_classifier


def _run(logger: LoggerDestination, run_name: str, **kwargs: Any) -> InMemoryLogger:
    """Four batches of a tiny classifier logging to `logger`; returns what an InMemoryLogger saw."""
    torch.manual_seed(0)
    model = mlp_classifier(in_features=4, num_classes=2, hidden=4)
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    memory = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=10),
        eval_dataloader=DataLoader(data, batch_size=20),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.5),
        loggers=[logger, memory],
        run_name=run_name,
        seed=0,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )
    trainer.fit()
    trainer.close()
    return memory


def _values(memory: InMemoryLogger, name: str) -> tuple[list[int], list[Any]]:
    read = memory.steps_and_values
    return read(name)


def test_import_cadence_imports_neither_tensorboard_nor_wandb() -> None:
    code = (
        "import sys, cadence, cadence.loggers\n"
        "from cadence.loggers import TensorboardLogger, WandBLogger\n"
        "TensorboardLogger(log_dir='unused'); WandBLogger(project='unused')\n"
        "print(sorted(m for m in ('tensorboard', 'wandb') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# TensorBoard --------------------------------------------------------------------------------------
def test_tensorboard_logger_writes_scalars_at_their_steps_and_the_hyperparameters(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="TensorboardLogger needs tensorboard: pip install 'cadence[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    from cadence.loggers import TensorboardLogger

    memory = _run(TensorboardLogger(log_dir=tmp_path, flush_interval=2), "tb-run", eval_interval="2ba")
    events = EventAccumulator(str(tmp_path / "tb-run"))  # Composer's layout: <log_dir>/<run_name>
    events.Reload()
    assert {"loss/train/total", "lr-SGD/group0", "metrics/eval/MulticlassAccuracy"} <= set(events.Tags()["scalars"])
    for tag in ("loss/train/total", "metrics/eval/CrossEntropy"):
        written = events.Scalars(tag)
        steps, values = _values(memory, tag)
        assert [event.step for event in written] == steps
        assert [event.value for event in written] == pytest.approx(values, rel=1e-6)
    assert [event.step for event in events.Scalars("metrics/eval/MulticlassAccuracy")] == [2, 4]

    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["seed"].number_value == 0
    assert hparams["precision"].string_value == "fp32"
    assert hparams["max_duration"].string_value == "4ba"


def test_tensorboard_logger_writes_one_number_values_only(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="TensorboardLogger needs tensorboard: pip install 'cadence[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from cadence.loggers import TensorboardLogger

    logger = TensorboardLogger(log_dir=tmp_path)
    logger.log_metrics({"a": torch.tensor([2.5]), "b": 3, "text": "hello", "vector": torch.ones(3)}, step=7)
    logger.finish()
    events = EventAccumulator(str(tmp_path / "run"))  # no trainer: the run is called "run"
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["a", "b"]
    assert [(e.step, e.value) for e in events.Scalars("a")] == [(7, 2.5)]
    with pytest.raises(ValueError, match="flush_interval"):
        TensorboardLogger(flush_interval=0)


def test_tensorboard_logger_says_how_to_install_tensorboard(tmp_path: Path, monkeypatch) -> None:
    from cadence.loggers import TensorboardLogger

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    with pytest.raises(ImportError, match=r"cadence\[tensorboard\]"):
        TensorboardLogger(log_dir=tmp_path).log_metrics({"a": 1.0}, step=1)


# Weights & Biases (offline) ------------------------------------------------------------------------
def _records(path: Path) -> list[Any]:
    """The protobuf records of a W&B run file (``run-<id>.wandb``): a 7-byte header, then 32 KiB blocks
    of chunks, each with a 7-byte header (crc32, length, type: 1 whole, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data, block, position, pending, records = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    while position + 7 <= len(data):
        if block - position % block < 7:  # too little room left for a chunk header: the block is padded
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _run_files(root: Path, run_id: str) -> list[Path]:
    """Every offline run file of W&B run `run_id` (a resumed run's folder name ends in -1, -2, ...)."""
    return sorted((root / "wandb").glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"))


def _offline_run(path: Path) -> dict[str, Any]:
    """What an offline run file holds: the run's name and project, its config, the history rows by step (without
    W&B's own ``_step``, ``_runtime``, ``_timestamp``) and the exit code."""
    run: dict[str, Any] = {"history": {}, "config": {}, "exit_code": None}
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(name=record.run.display_name, project=record.run.project)
            run["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            run["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            row = {key: json.loads(value) for key, value in items.items() if not key.startswith("_")}  # not W&B's own
            run["history"][record.history.step.num] = row
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """W&B without network, writing under `tmp_path` only; its settings singleton (which caches the
    environment it first saw) is torn down afterwards."""
    wandb = pytest.importorskip("wandb", reason="WandBLogger needs wandb: pip install 'cadence[wandb]'")
    for variable, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
        "WANDB_CONSOLE": "off",
    }.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    wandb.teardown()
    yield tmp_path
    wandb.teardown()


def test_wandb_logger_offline_run_holds_the_metrics_by_step_and_the_config(offline_wandb: Path) -> None:
    from cadence.loggers import WandBLogger

    logger = WandBLogger(project="cadence-tests", init_kwargs={"mode": "offline", "dir": str(offline_wandb)})
    memory = _run(logger, "wb-run")
    saved = logger.state_dict()
    assert logger.run is None  # finished by Trainer.close
    (path,) = _run_files(offline_wandb, saved["run_id"])
    run = _offline_run(path)
    assert (run["name"], run["project"]) == ("wb-run", "cadence-tests")  # named after the trainer's run
    steps, losses = _values(memory, "loss/train/total")
    assert sorted(run["history"]) == steps == [1, 2, 3, 4]
    assert [run["history"][step]["loss/train/total"] for step in steps] == pytest.approx(losses)
    assert run["history"][4]["metrics/eval/MulticlassAccuracy"] == pytest.approx(
        memory.most_recent_values["metrics/eval/MulticlassAccuracy"]
    )
    assert run["config"]["seed"] == 0 and run["config"]["max_duration"] == "4ba"
    assert run["exit_code"] == 0


def test_wandb_logger_resumes_its_run_from_a_checkpoint_and_records_a_failure(offline_wandb: Path) -> None:
    from cadence.loggers import WandBLogger

    first = WandBLogger(project="cadence-tests")  # offline through WANDB_MODE
    first.log_metrics({"x": 1.0}, step=1)
    saved = first.state_dict()
    first.finish()
    resumed = WandBLogger(project="cadence-tests")
    resumed.load_state_dict(saved)  # as a checkpoint restores it, before AFTER_LOAD starts the run
    resumed.log_metrics({"x": torch.tensor(2.0)}, step=2)
    assert resumed.run.id == saved["run_id"]
    resumed.finish("FAILED", error=RuntimeError("boom"))
    runs = [_offline_run(path) for path in _run_files(offline_wandb, saved["run_id"])]
    by_exit_code = {run["exit_code"]: run["history"] for run in runs}
    assert by_exit_code == {0: {1: {"x": 1.0}}, 1: {2: {"x": 2.0}}}  # the failure is recorded as exit code 1
