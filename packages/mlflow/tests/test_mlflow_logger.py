"""The MLflow logger against real MLflow: a local SQLite store and a real `mlflow server` subprocess.

No part of MLflow is mocked. One server is started for the module (in the background, while
the local tests run); the outage tests kill it with SIGKILL and start it again on the same
port and store. Points are compared exactly: (step, value) for every key.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

mlflow = pytest.importorskip("mlflow", reason="the MLflow logger's tests need mlflow (pip install mlflow)")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.protos.service_pb2 import LogBatch  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.proto_json_utils import message_to_json  # noqa: E402

import cadence  # noqa: E402
from cadence.loggers.logger import run_hyperparameters  # noqa: E402
from cadence_mlflow import (  # noqa: E402
    IMPORT_COMMAND,
    TAG_TARGET_RUN,
    MLFlowLogger,
    MLflowLoggerWarning,
    chunk_metrics,
    chunk_params_tags,
    import_spill,
    resume_run_id,
    sanitize_name,
    stable_str,
)
from cadence_mlflow.importer import main as _main  # noqa: E402

FAST = {"flush_interval_s": 0.05, "max_backoff_s": 0.5}


# Fixtures -------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite backend, as a subprocess in its own process group."""

    def __init__(self, root: Path):
        self.root = root
        self.db = root / "server.db"
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_uri(self) -> str:
        return f"sqlite:///{self.db}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        # The GenAI job runner starts 8 more Python processes; tracking does not need it (2 cores here).
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        # `python -m mlflow`: the interpreter that imported mlflow here runs it, whether or not an `mlflow` script is
        # beside it or on PATH
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--backend-store-uri", self.store_uri, "--default-artifact-root", str(self.root / "artifacts"),
                   "--workers", "1"]  # fmt: skip
        with (self.root / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=env, start_new_session=True
            )

    def wait_ready(self, timeout_s: float = 150.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"mlflow server did not answer within {timeout_s} s:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group this test started: the CLI and its workers
            self.proc.wait(timeout=30)
        self.proc = None

    def ensure_running(self) -> None:
        if self.proc is None:
            self.start()
        self.wait_ready()

    def log_tail(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module", autouse=True)
def _server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """Started before the local tests so that its start-up overlaps them."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def server(_server_process: MlflowServer) -> MlflowServer:
    _server_process.ensure_running()
    return _server_process


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def log_steps(logger: MLFlowLogger, steps: range, expected: dict[str, list[tuple[int, float]]]) -> list[float]:
    """Log 5 metrics per step (tensors and floats); returns the duration of every log_metrics call."""
    durations = []
    for step in steps:
        values = {
            "loss/train/total": torch.tensor(1.0 / (step + 1)),
            "metrics/acc": torch.tensor(step / 1000, dtype=torch.float64),
            "lr-SGD/group0": 0.1 * 0.99**step,
            "samples": step * 32,
            "tokens": torch.tensor(step * 1000, dtype=torch.int64),
        }
        started = time.perf_counter()
        logger.log_metrics(values, step)
        durations.append(time.perf_counter() - started)
        for key, value in values.items():
            expected.setdefault(key, []).append((step, float(value)))
    return durations


# Local SQLite store ---------------------------------------------------------------------------
def test_local_store_gets_every_point_param_and_name_exactly(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("local", run_name="exact", tracking_uri=sqlite_uri, tags={"team": "core"},
                          spill_dir=tmp_path / "spill", **FAST)  # fmt: skip
    params: dict[str, Any] = {
        "optimizer": {"name": "SGD", "lr": 0.1, "betas": (0.9, 0.99), "nested": {"deep": 1}},
        "seed": 7,
        "flag": True,
        "nothing": None,
        "dtype": torch.bfloat16,
        "config": "c" * 7000,
    }
    params.update({f"grid/p{i:03d}": i for i in range(250)})  # 250 params in one call: 3 requests
    with pytest.warns(MLflowLoggerWarning, match="'config' is 7000 characters long") as record:
        logger.log_hyperparameters(params)
    assert len(record) == 1
    logger.log_hyperparameters({"seed": 7, "optimizer": {"lr": 0.1}})  # the same values again: nothing happens

    expected: dict[str, list[tuple[int, float]]] = {}
    log_steps(logger, range(500), expected)  # 2500 points: at least 3 requests
    with pytest.warns(MLflowLoggerWarning) as record:
        logger.log_metrics({"timing(s)": 1.5, "a:b@c,d": 2.0, "a_b_c_d": 3.0, "bad": float("nan"), "up": 1.0}, 0)
        logger.log_metrics({"bad": float("nan"), "worse": torch.tensor(float("-inf")), "up": float("inf")}, 1)
        weight = torch.ones(2, requires_grad=True)  # a loss with its graph: queued detached, delivered as a number
        logger.log_metrics({"up": 2.0, "with_graph": (weight * 1.5).sum()}, 2)
        assert logger.flush(timeout_s=60)
    messages = [str(w.message) for w in record]
    collided = f"a_b_c_d_{hashlib.sha1(b'a_b_c_d').hexdigest()[:8]}"
    assert sum("'timing(s)'" in m and "'timing_s_'" in m for m in messages) == 1
    assert sum("'a:b@c,d' is not a valid MLflow key; logging it as 'a_b_c_d'" in m for m in messages) == 1
    assert sum("'a_b_c_d'" in m and "already uses" in m and collided in m for m in messages) == 1
    assert sum("'bad' is nan" in m for m in messages) == 1  # once per key, though logged twice
    assert sum("'worse' is -inf" in m for m in messages) == 1
    assert sum("'up' is inf" in m for m in messages) == 1
    assert len(messages) == 6
    logger.finish()
    assert logger.stats["delivered_points"] == 2500 + 6
    assert logger.stats["requests"] >= 3 + 3  # metric requests + param/tag requests

    client = MlflowClient(sqlite_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "exact"
    assert run.data.tags["team"] == "core"
    for key, points in expected.items():
        assert history(client, logger.run_id, key) == points, key
    assert history(client, logger.run_id, "timing_s_") == [(0, 1.5)]
    assert history(client, logger.run_id, "a_b_c_d") == [(0, 2.0)]
    assert history(client, logger.run_id, collided) == [(0, 3.0)]
    assert history(client, logger.run_id, "up") == [(0, 1.0), (2, 2.0)]
    assert history(client, logger.run_id, "with_graph") == [(2, 3.0)]
    assert not {"bad", "worse"} & set(run.data.metrics)
    assert run.data.tags["cadence.nonfinite/bad"] == "nan at step 0"
    assert run.data.tags["cadence.nonfinite/worse"] == "-inf at step 1"

    logged = run.data.params
    assert logged["optimizer/name"] == "SGD" and logged["optimizer/lr"] == "0.1"
    assert logged["optimizer/betas"] == "[0.9, 0.99]" and logged["optimizer/nested/deep"] == "1"
    assert (logged["seed"], logged["flag"], logged["nothing"], logged["dtype"]) == (
        "7",
        "True",
        "None",
        "torch.bfloat16",
    )
    assert all(logged[f"grid/p{i:03d}"] == str(i) for i in range(250))
    assert len(logged["config"]) == 6000 and logged["config"].endswith("...[truncated]")
    full = Path(client.download_artifacts(logger.run_id, "cadence/params.json", str(tmp_path)))
    text = full.read_text()
    assert json.loads(text)["config"] == "c" * 7000
    assert run.data.tags["cadence.params_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert not (tmp_path / "spill").exists()  # nothing was spilled, nothing was created


def test_requests_stay_within_mlflow_limits() -> None:
    """2500 metrics and 250 params (with long values) split into compliant requests, measured as MLflow encodes them."""
    points = [(f"metric/{i}", float(i) / 3, 1_700_000_000_000 + i, i) for i in range(2500)]
    chunks = chunk_metrics(points)
    assert [len(chunk) for chunk in chunks] == [1000, 1000, 500]
    assert [p for chunk in chunks for p in chunk] == points
    params = [(f"param/{i}", "v" * 6000) for i in range(250)]
    tags = [(f"tag/{i}", "é" * 5000) for i in range(150)]  # non-ASCII: 6 bytes each once JSON-escaped
    requests = chunk_params_tags(params, tags)
    assert [p for ps, _ in requests for p in ps] == params and [t for _, ts in requests for t in ts] == tags
    for ps, ts in requests:
        body = LogBatch(run_id="0" * 32, params=[Param(k, v).to_proto() for k, v in ps],
                        tags=[RunTag(k, v).to_proto() for k, v in ts])  # fmt: skip
        assert len(ps) <= 100 and len(ts) <= 100 and len(message_to_json(body).encode()) < 1_000_000
    for chunk in chunks:
        body = LogBatch(run_id="0" * 32, metrics=[Metric(k, v, t, s).to_proto() for k, v, t, s in chunk])
        assert len(message_to_json(body).encode()) < 1_000_000


def test_names_and_params_are_deterministic() -> None:
    assert sanitize_name("timing(s)") == "timing_s_"
    assert sanitize_name("loss:train@1,(a)") == "loss_train_1__a_"
    assert sanitize_name("/a//./b/../c/") == "a/_/b/__/c"
    long = sanitize_name("x" * 300)
    assert len(long) == 250 and long == sanitize_name("x" * 300) != sanitize_name("x" * 301)

    def schedule(step: int) -> float:
        return step

    class Config:  # repr with a memory address
        pass

    assert stable_str(schedule).endswith("schedule") and " at 0x" not in stable_str(Config())
    assert stable_str({"b": {3, 1, 2}, "a": (1, "x")}) == '{"a": [1, "x"], "b": [1, 2, 3]}'


def test_trainer_run_lands_in_mlflow(sqlite_uri: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(48, 8), torch.randint(0, 3, (48,))
    model = cadence.Classifier(torch.nn.Linear(8, 3), num_classes=3)
    tracking = MLFlowLogger("trainer", tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    memory = cadence.InMemoryLogger()
    trainer = cadence.Trainer(
        model=model,
        train_dataloader=DataLoader(TensorDataset(x, y), batch_size=8),
        eval_dataloader=DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8),
        max_duration="2ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        loggers=[tracking, memory],
        device="cpu",
        seed=1,
        run_name="tiny-run",
        progress_bar=False,
    )
    trainer.fit()
    trainer.close()

    client = MlflowClient(sqlite_uri)
    run = client.get_run(tracking.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny-run"
    assert set(memory.data) >= {"loss/train/total", "lr-SGD/group0", "metrics/eval/MulticlassAccuracy"}
    for key in memory.data:
        steps, values = memory.steps_and_values(key)
        assert history(client, tracking.run_id, key) == list(zip(steps, map(float, values))), key
    assert history(client, tracking.run_id, "loss/train/total")[0][0] == 1 and len(steps) > 0
    assert len(history(client, tracking.run_id, "loss/train/total")) == 12  # 6 batches x 2 epochs
    hyperparameters = run_hyperparameters(trainer.state)
    assert run.data.params == {key: stable_str(value) for key, value in hyperparameters.items()}


def test_resume_attaches_to_the_run_and_keeps_steps_unique(sqlite_uri: str, tmp_path: Path) -> None:
    first = MLFlowLogger(tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    first.log_hyperparameters({"seed": 3, "lr": 0.1})
    for step in range(1, 11):
        first.log_metrics({"loss": float(step)}, step)
    first.finish("FAILED")  # the process died after step 10 (its crash handler marks the run)
    first.finish("FINISHED")  # idempotent: the first status stays
    client = MlflowClient(sqlite_uri)
    assert client.get_run(first.run_id).info.status == "FAILED"
    with pytest.raises(ValueError, match="status"):
        first.finish("DONE")

    second = MLFlowLogger(tracking_uri=sqlite_uri, run_id=first.run_id, spill_dir=tmp_path / "spill", **FAST)
    assert (second.run_id, second.experiment_id) == (first.run_id, first.experiment_id)
    assert client.get_run(first.run_id).info.status == "RUNNING"
    second.log_hyperparameters({"seed": 3, "lr": 0.1})  # identical params again: no error, no warning
    with pytest.warns(MLflowLoggerWarning, match="'lr' is already '0.1'"):
        second.log_hyperparameters({"lr": 0.2})
    for step in range(6, 16):  # resumed from the checkpoint of step 5: steps 6-10 come again
        second.log_metrics({"loss": 100.0 + step}, step)
    second.finish("FINISHED")  # what the trainer calls once per run (the Callback hook `close` no longer does)
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"seed": "3", "lr": "0.1"}
    assert run.data.tags["cadence.segments"] == "2"
    assert history(client, first.run_id, "loss") == [(s, float(s)) for s in range(1, 11)] + [
        (s, 100.0 + s) for s in range(11, 16)
    ]


class CrashAt(cadence.Callback):
    def __init__(self, batch: int):
        self.batch = batch

    def batch_end(self, state: cadence.State, logger: cadence.Logger) -> None:
        if state.timestamp.batch == self.batch:
            raise RuntimeError("simulated crash")


def test_trainer_crash_and_autoresume_continue_the_same_run(sqlite_uri: str, tmp_path: Path) -> None:
    x, y = torch.randn(48, 8), torch.randint(0, 3, (48,))
    save_folder = tmp_path / "checkpoints"

    def make_trainer(logger: MLFlowLogger, callbacks: list[cadence.Callback]) -> cadence.Trainer:
        torch.manual_seed(0)
        model = cadence.Classifier(torch.nn.Linear(8, 3), num_classes=3)
        return cadence.Trainer(model=model, train_dataloader=DataLoader(TensorDataset(x, y), batch_size=8),
                               max_duration="2ep", optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
                               loggers=[logger], callbacks=callbacks, device="cpu", seed=1, progress_bar=False,
                               save_folder=save_folder, save_interval="1ep", autoresume=True)  # fmt: skip

    assert resume_run_id(save_folder) is None
    first = MLFlowLogger("resume", tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    with pytest.raises(RuntimeError, match="simulated crash"):
        make_trainer(first, [CrashAt(batch=9)]).fit()  # checkpoint at batch 6, crash after batch 9
    first.finish("FAILED")
    assert resume_run_id(save_folder) == first.run_id

    second = MLFlowLogger("resume", tracking_uri=sqlite_uri, run_id=resume_run_id(save_folder),
                          spill_dir=tmp_path / "spill", **FAST)  # fmt: skip
    trainer = make_trainer(second, [])
    trainer.fit()  # batches 7-12; 7-9 were logged before the crash
    trainer.close()
    client = MlflowClient(sqlite_uri)
    run = client.get_run(first.run_id)
    assert second.run_id == first.run_id and run.info.status == "FINISHED"
    assert run.data.tags["cadence.segments"] == "2"
    steps = [step for step, _ in history(client, first.run_id, "loss/train/total")]
    assert steps == list(range(1, 13))  # every step once, in order
    assert len(client.search_runs([first.experiment_id])) == 1


def test_what_the_store_refuses_is_isolated_and_the_rest_lands(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger(tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    client = MlflowClient(sqlite_uri)
    client.log_param(logger.run_id, "lr", "0.5")  # another writer got there first; params cannot change
    logger.log_hyperparameters({"lr": 0.1, "seed": 1, "batch_size": 64})
    with pytest.warns(MLflowLoggerWarning) as record:
        logger.log_metrics({"loss": 1.0, "far": 2.0}, 1)
        logger.log_metrics({"loss": 0.5, "far": 3.0}, 2**63)  # beyond MLflow's int64 step
        assert logger.flush(timeout_s=30)
    messages = [str(w.message) for w in record]
    assert any("refused param 'lr'='0.1'" in m for m in messages)
    assert any("'far' has step 9223372036854775808" in m for m in messages)
    logger.finish()
    run = client.get_run(logger.run_id)
    assert run.data.params == {"lr": "0.5", "seed": "1", "batch_size": "64"}
    assert history(client, logger.run_id, "loss") == [(1, 1.0)]
    assert history(client, logger.run_id, "far") == [(1, 2.0)]


def test_several_loggers_in_one_process_keep_their_runs_apart(sqlite_uri: str, tmp_path: Path) -> None:
    loggers = [
        MLFlowLogger(f"exp-{i}", tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST) for i in range(3)
    ]
    for step in range(100):
        for index, logger in enumerate(loggers):
            logger.log_metrics({"loss": torch.tensor(float(index * 1000 + step))}, step)
    for logger in loggers:
        logger.finish()
    client = MlflowClient(sqlite_uri)
    assert len({logger.run_id for logger in loggers}) == 3
    for index, logger in enumerate(loggers):
        assert history(client, logger.run_id, "loss") == [(s, float(index * 1000 + s)) for s in range(100)]


def test_only_rank_zero_creates_a_run(sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    logger = MLFlowLogger("ranks", tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    assert logger.run_id is None
    logger.log_hyperparameters({"a": 1})
    logger.log_metrics({"loss": torch.tensor(1.0)}, 1)
    assert logger.flush(timeout_s=1)
    logger.finish()
    assert MlflowClient(sqlite_uri).get_experiment_by_name("ranks") is None


def test_unreachable_server_at_start_logs_offline_then_imports(
    tmp_path: Path, template_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # so that the abandoned request ends soon
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    spill = tmp_path / "spill"
    with socket.socket() as hung:  # a "server" that accepts connections and never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        dead = f"http://127.0.0.1:{hung.getsockname()[1]}"
        started = time.monotonic()
        with pytest.warns(MLflowLoggerWarning, match="logged offline"):
            logger = MLFlowLogger("offline-exp", run_name="offline-run", tracking_uri=dead, connect_timeout_s=0.5,
                                  spill_dir=spill, **FAST)  # fmt: skip
        assert logger.offline and time.monotonic() - started < 10
        logger.log_hyperparameters({"model": {"width": 8}})
        expected: dict[str, list[tuple[int, float]]] = {}
        log_steps(logger, range(30), expected)
        with pytest.warns(MLflowLoggerWarning, match=f"{IMPORT_COMMAND} {spill} --tracking-uri {dead}"):
            logger.finish()

    shutil.copy(template_db, tmp_path / "server.db")
    target = f"sqlite:///{tmp_path / 'server.db'}"
    with contextlib.redirect_stdout(io.StringIO()) as output:
        assert _main(["import", str(spill), "--tracking-uri", target]) == 0
    assert logger.run_id in output.getvalue()
    client = MlflowClient(target)
    experiment = client.get_experiment_by_name("offline-exp")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "offline-run"
    assert run.data.params == {"model/width": "8"}
    for key, points in expected.items():
        assert history(client, run.info.run_id, key) == points
    assert import_spill(spill, target) == {logger.run_id: run.info.run_id}  # a second import changes nothing
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert history(client, run.info.run_id, "samples") == expected["samples"]


def test_import_cadence_does_not_import_mlflow() -> None:
    """No module of the core imports mlflow when it is imported (only inside functions)."""

    def imports_at_import_time(tree: ast.Module) -> Iterator[str]:
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # runs later, if at all
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                yield node.module or ""
            stack.extend(ast.iter_child_nodes(node))

    for path in Path(cadence.__file__).parent.rglob("*.py"):
        for name in imports_at_import_time(ast.parse(path.read_text())):
            assert name.split(".")[0] != "mlflow", f"{path} imports {name} at import time"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_values_are_read_without_syncing_the_training_thread(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger(tracking_uri=sqlite_uri, spill_dir=tmp_path / "spill", **FAST)
    expected = []
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call on the training thread raises
    try:
        for step in range(200):
            loss = torch.full((), step / 7, device="cuda")
            logger.log_metrics({"loss": loss, "half": loss.to(torch.bfloat16)}, step)
            expected.append(step)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert logger.flush(timeout_s=60)
    logger.finish()
    client = MlflowClient(sqlite_uri)
    assert [s for s, _ in history(client, logger.run_id, "loss")] == expected
    assert history(client, logger.run_id, "loss")[-1][1] == pytest.approx(199 / 7)


# A real tracking server -----------------------------------------------------------------------
def test_server_receives_params_metrics_and_artifacts(server: MlflowServer, tmp_path: Path) -> None:
    logger = MLFlowLogger("server", run_name="served", tracking_uri=server.uri, spill_dir=tmp_path / "spill", **FAST)
    logger.log_hyperparameters({"data": {"name": "digits", "batch_size": 32}, "methods": ["mixup", "blurpool"]})
    logger.set_tags({"phase": "server", "attempt": 2})
    expected: dict[str, list[tuple[int, float]]] = {}
    log_steps(logger, range(100), expected)
    wide = {f"layer{i:04d}/grad_norm": i / 10 for i in range(1200)}  # 1200 keys in one call: 2 requests
    logger.log_metrics(wide, 300)
    (tmp_path / "plot.txt").write_text("a plot")
    logger.log_artifact(tmp_path / "plot.txt", name="plots/loss.txt")
    assert logger.flush(timeout_s=60)
    logger.finish()
    client = MlflowClient(server.uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "served"
    assert (run.data.tags["phase"], run.data.tags["attempt"]) == ("server", "2")
    assert run.data.params == {"data/name": "digits", "data/batch_size": "32", "methods": '["mixup", "blurpool"]'}
    for key, points in expected.items():
        assert history(client, logger.run_id, key) == points
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("layer")} == wide
    assert [f.path for f in client.list_artifacts(logger.run_id, "plots")] == ["plots/loss.txt"]


def test_outage_keeps_logging_fast_and_delivers_every_point_once(
    server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow's own HTTP retries would wait minutes inside one call; leave retrying to the logger.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    logger = MLFlowLogger("outage", tracking_uri=server.uri, spill_dir=tmp_path / "spill", max_buffered_points=100,
                          **FAST)  # fmt: skip
    expected: dict[str, list[tuple[int, float]]] = {}
    log_steps(logger, range(10), expected)
    assert logger.flush(timeout_s=30)

    server.kill()  # the server dies at step 10 ...
    server.start()  # ... and a new one starts on the same port and store (it answers after several seconds)
    durations = []
    with pytest.warns(MLflowLoggerWarning, match="oldest are spooled"):
        for start in range(10, 50, 5):  # ... training goes on
            durations += log_steps(logger, range(start, start + 5), expected)
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while logger.stats["spooled_points"] == 0 and time.monotonic() < deadline:  # 200 points > 100 in memory
            time.sleep(0.01)
        started = time.monotonic()
        assert logger.flush() is False  # no timeout during an outage: returns at once, keeps everything
        assert time.monotonic() - started < 1.0  # at once: waiting would last the outage (margin for a busy host)
    assert logger.stats["failed_requests"] > 0 and logger.stats["spooled_points"] > 0
    durations += log_steps(logger, range(50, 60), expected)
    server.wait_ready()
    assert logger.flush(timeout_s=60)
    logger.finish()
    durations.sort()
    # A call that waited on the network would take MLflow's retries (seconds); the slowest call may still lose the
    # GIL to the sender thread for a few switch intervals on a loaded 2-CPU machine (11.7 ms seen once in CI).
    assert durations[-1] < 0.050, f"slowest log_metrics during the outage: {durations[-1] * 1e3:.1f} ms"
    assert durations[len(durations) // 2] < 0.001

    client = MlflowClient(server.uri)
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    for key, points in expected.items():
        assert history(client, logger.run_id, key) == points, key  # steps 0-59, each exactly once
    assert not list((tmp_path / "spill" / "spool").glob("*/*.jsonl"))  # the spool was replayed and removed


def test_server_that_never_comes_back_spills_to_a_local_store(
    server: MlflowServer, tmp_path: Path, template_db: Path
) -> None:
    """With MLflow's default HTTP retries, so the sender is stuck inside one request when finish gives up.

    (`template_db` only makes sure MLflow's SQL migration code is imported, so that the timing of
    `finish` measures the logger rather than first-time imports.)
    """
    spill = tmp_path / "spill"
    logger = MLFlowLogger("gone", run_name="gone-run", tracking_uri=server.uri, spill_dir=spill, **FAST)
    logger.log_hyperparameters({"seed": 5})
    expected: dict[str, list[tuple[int, float]]] = {}
    log_steps(logger, range(5), expected)
    assert logger.flush(timeout_s=30)
    server.kill()  # for good
    for start in range(5, 40, 5):
        log_steps(logger, range(start, start + 5), expected)
        time.sleep(0.05)
    started = time.monotonic()
    assert logger.flush(timeout_s=0.5) is False
    assert time.monotonic() - started < 5.0  # the timeout holds: the stuck request takes MLflow's retries (minutes)
    for start in range(40, 70, 5):  # training goes on for a while before it ends
        log_steps(logger, range(start, start + 5), expected)
        time.sleep(0.25)
    started = time.monotonic()
    with pytest.warns(MLflowLoggerWarning) as record:
        logger.finish(timeout_s=2.0)
    elapsed = time.monotonic() - started
    # 2 s of trying, then the local write (the spill store was prepared during the outage). Waiting for the stuck
    # request would take MLflow's retries (minutes); the margin is for a loaded 2-core machine (5.2 s seen once)
    assert 2.0 <= elapsed < 2.0 + 15.0, f"finish took {elapsed:.1f} s"
    (warning,) = [str(w.message) for w in record]
    assert str(spill / "spill.db") in warning and f"{IMPORT_COMMAND} {spill} --tracking-uri {server.uri}" in warning

    local = MlflowClient(f"sqlite:///{spill / 'spill.db'}")
    (spilled,) = local.search_runs([local.get_experiment_by_name("gone").experiment_id])
    assert spilled.data.tags[TAG_TARGET_RUN] == logger.run_id and spilled.info.status == "FINISHED"
    for key, points in expected.items():  # every undelivered point is there (the last request may be in both)
        assert set(points[5:]) <= set(history(local, spilled.info.run_id, key))

    # The data can be imported into the server's store once it is available again (here: directly).
    assert import_spill(spill, server.store_uri) == {spilled.info.run_id: logger.run_id}
    client = MlflowClient(server.store_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"seed": "5"}
    for key, points in expected.items():
        assert history(client, logger.run_id, key) == points, key  # steps 0-69, each exactly once
