"""One owner for the end of a run, seen from MLflow: the trainer records FINISHED, FAILED or KILLED once,
also when a real process is sent SIGTERM; the at-exit hook only catches a process that never got that far."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient

CHILD = textwrap.dedent(
    """
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from cadence import Callback, Trainer
    from cadence.testing import mlp_classifier
    from cadence_mlflow import MLFlowLogger

    uri, run_id_file, started_file, mode = sys.argv[1:5]
    logger = MLFlowLogger("end-of-run", tracking_uri=uri, spill_dir=sys.argv[5], flush_interval_s=0.05)
    open(run_id_file, "w").write(logger.run_id)

    class Started(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch == 3:
                open(started_file, "w").close()
            if mode == "fail" and state.timestamp.batch == 5:
                raise RuntimeError("boom at batch 5")

    if mode == "before-trainer":
        raise RuntimeError("the data could not be loaded")  # the trainer never owned the run
    model = mlp_classifier(4, 2)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = Trainer(model=model, train_dataloader=DataLoader(data, batch_size=4),
                      max_duration="100000ba" if mode == "sigterm" else "8ba",
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.1), callbacks=[Started()],
                      loggers=[logger], progress_bar=False, seed=0)
    trainer.fit()
    trainer.close()
    """
)


def _run(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, str, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id_file, started = tmp_path / "run_id", tmp_path / "started"
    args = [str(run_id_file), str(started), mode, str(tmp_path / "spill")]
    child = subprocess.Popen([sys.executable, "-c", CHILD, uri, *args], stderr=subprocess.PIPE, cwd=tmp_path)
    if mode == "sigterm":
        deadline = time.monotonic() + 180
        while not started.exists():
            assert child.poll() is None, child.communicate()[1].decode()
            assert time.monotonic() < deadline, "the child never started training"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGTERM)
    _, stderr = child.communicate(timeout=180)
    return child, uri, run_id_file.read_text() + "\n" + stderr.decode()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "status", "exit_code", "failure"),
    [
        ("sigterm", "KILLED", 128 + signal.SIGTERM, "RunTerminated"),
        ("fail", "FAILED", 1, "MethodError"),
        ("finish", "FINISHED", 0, None),
        ("before-trainer", "FAILED", 1, None),  # the at-exit hook: the last resort
    ],
)
def test_the_run_ends_once_with_the_right_status(
    tmp_path: Path, mode: str, status: str, exit_code: int, failure: str | None
) -> None:
    child, uri, output = _run(tmp_path, mode)
    run_id = output.splitlines()[0]
    assert child.returncode == exit_code, output
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == status
    assert run.data.tags.get("cadence.failure") == failure
    assert run.info.end_time is not None
