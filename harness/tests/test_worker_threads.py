"""CPU workers that run at once share the cores out instead of each taking all of them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cadence_harness.running.runners import Interruption, worker_threads


def test_jobs_on_a_cpu_share_the_cores_unless_the_user_chose() -> None:
    cores = os.cpu_count() or 1
    assert worker_threads(1, "cpu", {}) is None  # one job: torch's default, every core
    assert worker_threads(2, "cpu", {}) == max(1, cores // 2)
    assert worker_threads(10 * cores, "cpu", {}) == 1  # never zero
    assert worker_threads(4, "gpu", {}) is None  # a GPU run's host threads are not the bottleneck torch sizes
    assert worker_threads(4, "cpu", {"OMP_NUM_THREADS": "3"}) is None  # the user's setting is inherited


def test_a_worker_starts_with_the_threads_it_is_given(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import os, torch; print(os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"]
    interruption = Interruption(worker_threads=1)
    log = tmp_path / "worker.log"
    with log.open("w") as handle:
        assert interruption.wait(interruption.start(command, handle), timeout_s=120) == 0
    assert log.read_text().split() == ["1", "1"]
