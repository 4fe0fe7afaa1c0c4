"""End to end against a real `mlflow server` on 127.0.0.1: `cadence-bench run`, then `report`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cadence_harness.store_report import build_report


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {url} did not answer within {timeout_s} s")


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [
        str(mlflow),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{tmp_path / 'server.db'}",
        "--artifacts-destination",
        str(tmp_path / "artifacts"),
    ]
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.mark.slow
def test_run_and_report_against_a_real_server(mlflow_server: str, tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server}
    command = [
        sys.executable,
        "-m",
        "cadence_harness",
        "run",
        "--model",
        "tv/resnet20",
        "--data",
        "synthetic",
        "--subset",
        "8",
        "--eval-subset",
        "8",
        "--duration",
        "2ba",
        "--batch-size",
        "4",
        "--set",
        "target_accuracy=0.05",
        "--experiment",
        "e2e",
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baseline-s0: accuracy " in done.stdout and "in experiment 'e2e'" in done.stdout

    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("e2e").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["model"] == "tv/resnet20"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss/train/total")] == [1, 2]
    assert "config.json" in [a.path for a in client.list_artifacts(run.info.run_id)]
    assert not (tmp_path / "mlflow.db").exists()  # nothing went to a local store

    report = build_report(["e2e"], tracking_uri=mlflow_server, out_dir=tmp_path / "report")
    (summary,) = report.summaries
    assert summary.arm == "baseline" and summary.n == 1
    assert math_close(summary.accuracy.mean, run.data.metrics["final/accuracy"])
    assert (tmp_path / "report" / "e2e-pareto.png").is_file()


def math_close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9
