"""The whole suite's one setting: pytest-xdist workers share the CPU cores out instead of each taking all of them.

torch sizes its OpenMP pool to every core of the machine in each process. `make test` runs one pytest worker per
core, so on 2 cores two workers ran 2 threads each, and the tests' own subprocesses more again: each waits in
OpenMP barriers the others' threads hold up (the detection, stochastic depth and ghost batch norm tests took 88 s
on 2 workers that way, 36 s with one thread each). The harness's grid does the same for its workers
(`cadence_harness.running.runners.worker_threads`). The variable is set for the worker's subprocesses too
(torchrun jobs, grid workers, writer processes); a user's own ``OMP_NUM_THREADS`` is left as it is, and a run
in one process (``TEST_WORKERS=0``) keeps torch's default.
"""

from __future__ import annotations

import os
import sys

import pytest


def pytest_configure(config: pytest.Config) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # set by pytest-xdist in its workers
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # read when torch loads, here and in every subprocess
    if "torch" in sys.modules:  # a plugin imported it first: its pool is sized already
        sys.modules["torch"].set_num_threads(threads)
