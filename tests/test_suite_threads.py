"""The suite's workers share the cores out (the root conftest.py): two pytest-xdist workers with every core's
OpenMP threads each waited in each other's barriers, and the suite took twice as long."""

from __future__ import annotations

import os

import pytest
import torch


def test_each_pytest_worker_runs_torch_on_its_share_of_the_cores() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        pytest.skip("one pytest process: torch keeps its default, every core")
    # conftest.py sets it to cores // workers, for this worker and the subprocesses it starts (a user's own is kept)
    assert "OMP_NUM_THREADS" in os.environ, "no OMP_NUM_THREADS in a pytest-xdist worker: is conftest.py loaded?"
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
