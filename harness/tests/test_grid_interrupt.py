"""Ctrl-C on a grid: one line, the running run recorded KILLED, the records holding every finished run at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.records import read_records
from cadence_harness.running.runners import Interruption
from cadence_harness.running.tracking import client


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "code", "sigint"),
    [("ctrl-c", 130, "default"), ("kill", 143, "ignored")],
    ids=["SIGINT-to-the-process-group", "SIGTERM-to-a-grid-started-with-SIGINT-ignored"],
)
def test_ctrl_c_on_a_grid_kills_the_running_run_and_leaves_the_records_whole(
    stop: str, code: int, sigint: str, tmp_path: Path, tracking_uri: str, tiny_recipe_file: Any
) -> None:
    """Ctrl-C in a terminal reaches the grid and its worker; `kill PID` (SIGTERM) the grid alone, which passes
    it on to its workers as SIGINT: both end the same way, also where the grid was started with SIGINT ignored
    (a script's background job), which its workers inherit."""
    path = tiny_recipe_file(duration="200ba", seeds=3)
    records = tmp_path / "runs"
    command = [*_python_with_sigint(sigint), "grid", path, "--isolate", "--tracking-uri", tracking_uri]
    command += ["--records", str(records), "--log-dir", str(tmp_path / "logs")]
    # One thread per worker: beside the suite's other pytest worker, a 2-thread worker on 2 cores spins in OpenMP
    # barriers (a 200-batch run took over 420 s of wall time in CI, 15 s alone). SIGABRT prints every thread's
    # stack (see _stop).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    grid = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    file = records / "tiny.jsonl"
    deadline = time.monotonic() + 420  # a busy CI machine (the suite's other worker) slows the first run a lot
    while not (file.is_file() and file.read_text().strip()) and grid.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert grid.poll() is None, "the grid ended before the test could interrupt it"
    if not (file.is_file() and file.read_text().strip()):
        raise AssertionError(
            f"the first run did not finish within 420 s; where each process was:\n{_stop(grid, tmp_path)}"
        )
    time.sleep(1.0)  # the second run's worker is starting or training
    if stop == "ctrl-c":
        os.killpg(grid.pid, signal.SIGINT)
    else:
        grid.send_signal(signal.SIGTERM)
    out, err = grid.communicate(timeout=180)
    assert grid.returncode == code, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    line = next((line for line in out.splitlines() if line.startswith("interrupted:")), out)
    assert "1 runs finished now, 1 killed (recorded KILLED)" in line and "run the same command again" in line, out
    runs = client(tracking_uri).search_runs([client(tracking_uri).get_experiment_by_name("tiny").experiment_id])
    statuses = sorted((r.info.run_name, r.info.status) for r in runs)
    assert statuses == [("baseline-s0", "FINISHED"), ("baseline-s1", "KILLED")], statuses
    assert [r.seed for r in read_records([file])] == [0]  # the finished run, recorded at once; the killed one not


def test_an_interrupted_worker_that_does_not_stop_is_killed_after_the_grace_also_without_a_timeout(
    tmp_path: Path,
) -> None:
    """A worker deaf to SIGINT (hung, or started with it ignored) must not hold an interrupted grid until it ends."""
    deaf = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    interruption = Interruption(grace_s=0.5)
    with (tmp_path / "worker.log").open("w") as log:
        worker = interruption.start([sys.executable, "-c", deaf], log)
        threading.Timer(1.0, interruption.interrupt).start()
        started = time.monotonic()
        code = interruption.wait(worker, timeout_s=None)
    assert code == -signal.SIGKILL and time.monotonic() - started < 15


PROBE = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a script's background job
from cadence_harness.running.runners import sigint_reaches_workers
child = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"]
with sigint_reaches_workers():
    inside = subprocess.run(child, capture_output=True, text=True, check=True).stdout.split()
    deaf = signal.getsignal(signal.SIGINT) is not signal.default_int_handler
outside = subprocess.run(child, capture_output=True, text=True, check=True).stdout.split()
print(inside, deaf, outside, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def test_a_grid_that_ignores_sigint_starts_its_workers_with_sigint_at_its_default() -> None:
    """Ignored dispositions survive exec and Python keeps them: a worker started inside the block hears SIGINT
    from its first instruction, while the grid stays deaf to it, and the grid's SIG_IGN comes back after."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["['True']", "True", "['False']", "True"], out


def _python_with_sigint(disposition: str) -> list[str]:
    """`python -m cadence_harness` with SIGINT as a shell would start it, whatever pytest's own disposition (which
    children inherit when it is "ignored"): in a terminal's foreground SIGINT raises KeyboardInterrupt; in a
    script's background job POSIX shells ignore it."""
    handler = {"default": "signal.default_int_handler", "ignored": "signal.SIG_IGN"}[disposition]
    code = f"import runpy, signal; signal.signal(signal.SIGINT, {handler}); "
    code += "runpy.run_module('cadence_harness', run_name='__main__')"
    return [sys.executable, "-c", code]


def _stop(grid: subprocess.Popen[str], tmp_path: Path) -> str:
    """End a grid that hung, and every process of its group, so that none outlives the test; return where each
    was: faulthandler prints every thread's stack on SIGABRT (the worker's into its log, the grid's to stderr)."""
    os.killpg(grid.pid, signal.SIGABRT)
    time.sleep(3.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(grid.pid, signal.SIGKILL)
    out, err = grid.communicate(timeout=60)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("Extension modules:"))
    logs = "\n".join(
        f"--- {log.name}:\n{log.read_text(errors='replace')[-6000:]}" for log in (tmp_path / "logs").glob("*")
    )
    return f"--- grid stdout:\n{out[-3000:]}\n--- grid stderr:\n{err[-8000:]}\n{logs or '(no worker log)'}"
