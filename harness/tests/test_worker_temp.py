"""A grid's worker keeps its temporary files in a folder the grid removes, so a crash or a kill leaks nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadence_harness.running.runners import Interruption, worker_environment


def test_a_worker_gets_its_own_temporary_folder_and_keeps_the_shared_kernel_cache(tmp_path: Path) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert worker_environment(None, None, {"PATH": "/bin"}) is None  # nothing to change: this process's environment
    env = worker_environment(2, tmp_path, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "2", "TMPDIR": str(tmp_path),
                   "TORCHINDUCTOR_CACHE_DIR": default_cache_dir()}  # fmt: skip
    assert not env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))  # compiled kernels outlive the worker
    chosen = worker_environment(None, tmp_path, {"TORCHINDUCTOR_CACHE_DIR": "/kernels"})
    assert chosen == {"TORCHINDUCTOR_CACHE_DIR": "/kernels", "TMPDIR": str(tmp_path)}  # the user's choice stands


def test_what_a_killed_worker_made_in_its_temporary_folder_is_inside_the_folder_given(tmp_path: Path) -> None:
    """A worker past its timeout is killed before it can clean up: its files are in the grid's folder."""
    temp_dir = tmp_path / "worker-tmp"
    temp_dir.mkdir()
    made = tmp_path / "made"
    code = (
        "import sys, tempfile, time; from pathlib import Path\n"
        "Path(sys.argv[1]).write_text(tempfile.mkdtemp(prefix='cadence-mlflow-'))\n"
        "time.sleep(120)"
    )
    interruption = Interruption()
    with (tmp_path / "worker.log").open("w") as log:
        worker = interruption.start([sys.executable, "-c", code, str(made)], log, temp_dir)
        deadline = time.monotonic() + 60
        while not (made.is_file() and made.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(subprocess.TimeoutExpired):
            interruption.wait(worker, timeout_s=0.1)
    assert worker.returncode is not None and worker.returncode < 0  # killed
    assert Path(made.read_text()).parent == temp_dir
