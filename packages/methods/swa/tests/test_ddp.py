"""SWA under DDP: the ranks average the same weights, and the recomputed BatchNorm statistics are the mean
over the ranks of update_bn on each rank's own shard (identical on every rank)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cadence.testing import assert_same_tensors

SCRIPT = Path(__file__).with_name("ddp_run.py")


@pytest.mark.slow
def test_bn_statistics_are_averaged_over_the_ranks(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT)]
    run = subprocess.run([*launch, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["world"] == 2
    assert_same_tensors(ranks[0]["model"], ranks[1]["model"], "the two ranks' models")
    assert not torch.equal(
        ranks[0]["local"]["features.1.running_mean"], ranks[1]["local"]["features.1.running_mean"]
    )  # shards differ
    for name in ("running_mean", "running_var"):
        mean = (ranks[0]["local"][f"features.1.{name}"] + ranks[1]["local"][f"features.1.{name}"]) / 2
        torch.testing.assert_close(ranks[0]["model"][f"module.features.1.{name}"], mean, rtol=1e-6, atol=1e-7)
