"""Ctrl-C on a grid: one line, the running run recorded KILLED, the records holding every finished run at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.records import read_records
from cadence_harness.running.tracking import client


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "code"),
    [("ctrl-c", 130), ("kill", 143)],
    ids=["SIGINT-to-the-process-group", "SIGTERM-to-the-grid-alone"],
)
def test_ctrl_c_on_a_grid_kills_the_running_run_and_leaves_the_records_whole(
    stop: str, code: int, tmp_path: Path, tracking_uri: str, tiny_recipe_file: Any
) -> None:
    """Ctrl-C in a terminal reaches the grid and its worker; `kill PID` (SIGTERM) the grid alone, which passes
    it on to its workers: both end the same way."""
    path = tiny_recipe_file(duration="200ba", seeds=3)
    records = tmp_path / "runs"
    command = [sys.executable, "-m", "cadence_harness", "grid", path, "--isolate", "--tracking-uri", tracking_uri]
    command += ["--records", str(records), "--log-dir", str(tmp_path / "logs")]
    grid = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    file = records / "tiny.jsonl"
    deadline = time.monotonic() + 420  # a busy CI machine (the suite's other worker) slows the first run a lot
    while not (file.is_file() and file.read_text().strip()) and grid.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert grid.poll() is None, "the grid ended before the test could interrupt it"
    assert file.is_file() and file.read_text().strip(), "the first run did not finish within 420 s"
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
