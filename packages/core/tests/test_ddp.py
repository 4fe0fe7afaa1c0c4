"""DDP through torchrun: 2 gloo processes equal 1 process with the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_run.py")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_two_gloo_processes_match_one(tmp_path: Path, mode: str) -> None:
    """Also with the DDP module compiled (``compile_config``, eager backend: Dynamo's DDP graph splitting)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "one")], env=env, capture_output=True, text=True, timeout=300
    )
    assert single.returncode == 0, single.stderr
    # --standalone: torchrun picks a free port itself, so no other process can take it first
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    launch += [str(SCRIPT), str(tmp_path / "two"), *(["compile"] if mode == "compile" else [])]
    ddp = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    assert ddp.returncode == 0, ddp.stderr[-4000:]

    one = torch.load(tmp_path / "one" / "rank0.pt", weights_only=True)
    rank0 = torch.load(tmp_path / "two" / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "two" / "rank1.pt", weights_only=True)
    assert (one["world"], rank0["world"]) == (1, 2)
    assert one["batches"] == rank0["batches"] == 12  # 64 samples / global batch 16 = 4 per epoch, 3 epochs
    for name, value in one["model"].items():
        torch.testing.assert_close(rank0["model"][name], value, rtol=0, atol=1e-5)
    # exact evaluation: 1001 samples split 501/500 across ranks, nothing padded or counted twice
    assert rank0["before"]["MulticlassAccuracy"] == one["before"]["MulticlassAccuracy"]
    assert abs(rank0["before"]["CrossEntropy"] - one["before"]["CrossEntropy"]) < 1e-6
    assert rank0["after"] == rank1["after"]  # every rank reports the same synced metrics
    assert abs(rank0["after"]["MulticlassAccuracy"] - one["after"]["MulticlassAccuracy"]) <= 2 / 1001
    # only rank 0 logs and writes checkpoints
    assert rank0["logged"] > 0 and rank1["logged"] == 0
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").glob("*.pt")) == [
        "ep1-ba4.pt",
        "ep2-ba8.pt",
        "ep3-ba12.pt",
        "latest.pt",
    ]
