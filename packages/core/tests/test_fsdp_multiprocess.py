"""FSDP2 with two gloo processes through torchrun (CPU): issue 29's done-when and the methods under sharding.

Every run is `fsdp_run.py` or `fsdp_methods_run.py`, launched as a user would: plainly for one
process, ``torch.distributed.run --standalone --nproc_per_node 2`` for two.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
RUN, METHODS_RUN = HERE / "fsdp_run.py", HERE / "fsdp_methods_run.py"
TWO = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
GPT2_METHODS = ["--model", "gpt2", "--methods", "alibi,glu,clip,ema"]


def _run(command: list[str], expect_killed: bool = False) -> str:
    result = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=400, cwd=HERE)
    if expect_killed:
        assert result.returncode != 0, "the run was to be killed at its checkpoint"
    else:
        assert result.returncode == 0, result.stderr[-6000:]
    return result.stderr


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.mark.slow
def test_a_sharded_language_model_with_methods_is_killed_and_resumes_on_one_and_two_processes(tmp_path: Path) -> None:
    """The done-when of issue 29: tiny GPT-2 (random init) + ALiBi + GLU + gradient clipping + EMA, 6 AdamW
    steps, checkpoints every 2 batches; sharded on 2 processes, killed right after the checkpoint at batch 4,
    resumed sharded on 2 processes and unsharded on 1; each equals the uninterrupted unsharded run."""
    _run([sys.executable, str(RUN), str(tmp_path / "reference"), *GPT2_METHODS])
    killed = [str(RUN), str(tmp_path / "killed"), *GPT2_METHODS, "--fsdp", "{}", "--save", str(tmp_path / "ck")]
    _run([*TWO, *killed, "--kill-at", "4"], expect_killed=True)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["ep0-ba2.pt", "ep0-ba4.pt", "latest.pt"]
    assert not (tmp_path / "killed").exists()
    shutil.copytree(tmp_path / "ck", tmp_path / "ck1", symlinks=True)
    resume = [*GPT2_METHODS, "--autoresume"]
    _run([*TWO, str(RUN), str(tmp_path / "two"), *resume, "--fsdp", "{}", "--save", str(tmp_path / "ck")])
    _run([sys.executable, str(RUN), str(tmp_path / "one"), *resume, "--save", str(tmp_path / "ck1")])

    reference = _load(tmp_path / "reference" / "rank0.pt")
    two = [_load(tmp_path / "two" / f"rank{r}.pt") for r in (0, 1)]
    one = _load(tmp_path / "one" / "rank0.pt")
    assert (reference["world"], two[0]["world"], one["world"]) == (1, 2, 1)
    assert two[0]["sharded"] and not one["sharded"] and not reference["sharded"]
    assert reference["batches"] == two[0]["batches"] == one["batches"] == 6
    assert _max_difference(two[0]["model"], two[1]["model"]) == 0  # every rank gathers the same weights
    # 2 processes reduce in another order than 1: 2-process DDP differs from 1 process by 7e-6 here too
    assert _max_difference(two[0]["model"], reference["model"]) < 5e-5
    assert _max_difference(one["model"], reference["model"]) < 5e-5
    assert (tmp_path / "ck" / "ep1-ba6.pt").is_dir() and (tmp_path / "ck1" / "ep1-ba6.pt").is_file()


@pytest.mark.slow
def test_every_method_that_runs_sharded_equals_its_unsharded_run(tmp_path: Path) -> None:
    """Each case trains 8 batches with DDP and with FSDP in the same 2 processes (DDP equals one process,
    test_ddp.py): 27 methods on an MLP, small CNNs or a tiny GPT-2, and the sharding strategies and
    activation checkpointing without methods. ChannelsLast and block-mode stochastic depth are refused
    under FSDP (test_fsdp.py). SAM is compared with one process instead: under FSDP its perturbation uses
    the global gradient (there is no unsynchronised backward), as one process does; under DDP each
    rank's own."""
    _run([*TWO, str(METHODS_RUN), str(tmp_path / "two")])
    _run([sys.executable, str(METHODS_RUN), str(tmp_path / "one"), "sam"])
    results = json.loads((tmp_path / "two" / "results.json").read_text())
    errors = {name: result["error"] for name, result in results.items() if "error" in result}
    assert not errors, json.dumps({n: results[n].get("trace", results[n]["error"]) for n in errors})[-6000:]
    differences = {name: result["max_abs_diff"] for name, result in results.items() if name != "sam"}
    assert len(differences) == 31 and all(value <= 1e-6 for value in differences.values()), differences
    sam = _max_difference(_load(tmp_path / "two" / "sam.pt"), _load(tmp_path / "one" / "sam.pt"))
    assert sam <= 1e-6, sam


@pytest.mark.slow
def test_sharded_evaluation_equals_ddp_and_uneven_batch_counts_are_refused(tmp_path: Path) -> None:
    """Every forward under FSDP gathers weights from all ranks: 1,001 samples split 501/500 would leave
    rank 1 a batch short (a hang), so the trainer refuses them before training; 1,000 evaluate as DDP does."""
    failed = _run([*TWO, str(RUN), str(tmp_path / "x"), "--fsdp", "{}", "--eval", "1001"], expect_killed=True)
    assert "gives the ranks [6, 5] batches; pass eval_subset_num_batches=5" in failed
    _run([*TWO, str(RUN), str(tmp_path / "fsdp"), "--fsdp", "{}", "--eval", "1000", "--later", "1001"])
    _run([*TWO, str(RUN), str(tmp_path / "ddp"), "--eval", "1000"])
    sharded = [_load(tmp_path / "fsdp" / f"rank{r}.pt")["metrics"] for r in (0, 1)]
    assert sharded[0] == sharded[1] == _load(tmp_path / "ddp" / "rank0.pt")["metrics"]
    assert set(sharded[0]) == {"MulticlassAccuracy", "CrossEntropy"}
    for rank in (0, 1):  # a loader given to eval() or predict() later is checked too, on every rank
        refused = _load(tmp_path / "fsdp" / f"rank{rank}.pt")["refused"]
        assert [line.split(":")[0] for line in refused] == ["eval", "predict"]
        assert all("[6, 5] batches" in line for line in refused)
