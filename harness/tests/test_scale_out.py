"""``--nproc N`` / ``--fsdp``: each run on N processes through torchrun (gloo here), the global batch split across
the ranks, one MLflow run and one record per run, and refusals before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from cadence_harness.cli import main
from cadence_harness.records import read_records
from cadence_harness.running.loaders import FlipCrop, TensorLoader
from cadence_harness.running.recipe import RecipeError
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec
from cadence_harness.running.scale_out import check_world, require_processes, sharding
from cadence_harness.running.tracking import client

# No BatchNorm (whose statistics are per process): GroupNorm is per sample, so 2 processes with 2 samples each
# compute what one process computes with 4.
GROUPNORM = {"model_kwargs": {"norm": "groupnorm"}}


def _batches(world_size: int, rank: int, **kwargs: Any) -> list[list[int]]:
    x = torch.arange(11.0).view(11, 1)
    loader = TensorLoader((x, torch.arange(11)), seed=3, rank=rank, world_size=world_size, **kwargs)
    assert len(loader) == len(list(loader))  # the length each rank reports is what it yields
    return [batch[1].tolist() for batch in loader]


SHAPES = [
    {"batch_size": 4, "shuffle": True, "drop_last": True},  # training
    {"batch_size": 4, "shuffle": False},  # evaluation, a short last batch
    {"batch_size": 10, "shuffle": False},  # a last batch shorter than the ranks: the last rank has no share
]


@pytest.mark.parametrize("kwargs", SHAPES)
def test_the_ranks_together_yield_each_batch_of_one_process_once(kwargs: dict[str, Any]) -> None:
    whole = _batches(1, 0, **kwargs)
    shares = [_batches(3, rank, **kwargs) for rank in range(3)]
    merged = [[sample for share in shares if i < len(share) for sample in share[i]] for i in range(len(whole))]
    assert merged == whole
    if kwargs.get("drop_last"):  # training: every rank steps as often, on equal parts
        assert {len(share) for share in shares} == {len(whole)}


def test_a_set_too_small_for_a_share_per_rank_is_refused() -> None:
    data = (torch.zeros(3, 1), torch.zeros(3))
    with pytest.raises(ValueError, match="3 samples cannot give each of 2 ranks a share of every batch of 4"):
        TensorLoader(data, batch_size=4, shuffle=True, drop_last=True, rank=1, world_size=2)  # no full batch
    with pytest.raises(ValueError, match="each of 4 ranks"):
        TensorLoader(data, batch_size=4, shuffle=False, rank=0, world_size=4)  # a rank without samples
    one = TensorLoader(data, batch_size=4, shuffle=True, drop_last=True)
    assert len(one) == 1 and one.shares_for(1) and not one.shares_for(2)  # one process: a short batch
    assert TensorLoader(data, batch_size=4, shuffle=False).shares_for(3)  # evaluation: a sample per rank


def test_each_rank_draws_its_own_augmentation() -> None:
    images = torch.rand(8, 1, 4, 4)
    draws = []
    for rank in range(2):
        loader = TensorLoader((images, torch.zeros(8)), batch_size=8, shuffle=False, augment=FlipCrop(1), seed=0,
                              rank=rank, world_size=2)  # fmt: skip
        loader._start_epoch()
        draws.append(torch.rand(4, generator=loader._generator))
    assert not torch.equal(*draws)


def test_nproc_and_fsdp_join_a_runs_identity_only_when_set(tiny_recipe: Any) -> None:
    one = RunSpec(tiny_recipe(), (), 0)
    assert "nproc" not in one.config() and "fsdp" not in one.config()  # the hashes of 1-process runs are unchanged
    two = RunSpec(tiny_recipe(nproc=2), (), 0)
    assert two.config()["nproc"] == 2 and two.config_hash != one.config_hash
    spelled = [
        RunSpec(tiny_recipe(nproc=2, fsdp=f), (), 0).config_hash for f in ({}, {"sharding_strategy": "FULL_SHARD"})
    ]
    assert spelled[0] == spelled[1] != two.config_hash
    assert [sharding(None, 1), sharding(None, 2), sharding({"sharding_strategy": "SHARD_GRAD_OP"}, 2)] == [
        "none", "ddp", "fsdp:SHARD_GRAD_OP"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--nproc", "0"], "`nproc` = 0: must be an int >= 1"),
        (["--nproc", "3"], "use a multiple of 3"),
        (["--nproc", "2", "--set", "device_train_microbatch_size=4"], "use at most 2"),
        (["--nproc", "2", "--set", "fsdp.sharding_strategy=FULL"], "`fsdp.sharding_strategy` = 'FULL'"),
        (["--nproc", "2", "--fsdp", "--set", "fsdp.cpu_offload=true"], "cpu_offload"),  # the core's own check
        (["--nproc", "2", "--fsdp", "--set", "fsdp.forward_prefetch=true"], "forward_prefetch=True cannot be"),
    ],
)
def test_what_cannot_work_is_refused_before_anything_runs(
    flags: list[str], says: str, tiny_recipe_file: Any, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", tiny_recipe_file(), "--tracking-uri", tracking_uri, *flags]) == 2
    assert says in capsys.readouterr().err
    assert not Path(tracking_uri.removeprefix("sqlite:///")).exists()  # no MLflow run, not even a store


@pytest.mark.parametrize("command", ["run", "grid"])
@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--subset", "2"], "`nproc` = 2: 2 training samples (subset = 2) make no full batch of 4, and each of the 2 "
         "processes must train on its share of every batch; use --subset 4 or more, --batch-size 2 or less, or "
         "--nproc 1"),
        (["--eval-subset", "1"], "`nproc` = 2: 1 evaluation samples (eval_subset = 1) cannot give each of the 2 "
         "processes one to evaluate; use --eval-subset 2 or more, or --nproc 1"),
    ],
)  # fmt: skip
def test_data_too_small_to_share_is_refused_before_torchrun_starts(
    command: str,
    flags: list[str],
    says: str,
    tiny_recipe_file: Any,
    tracking_uri: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each rank's loader would refuse it (`TensorLoader.shares_for`): asked of the data one process builds."""
    argv = [command, tiny_recipe_file(), "--nproc", "2", "--tracking-uri", tracking_uri, *flags]
    assert main([*argv, *(["--log-dir", str(tmp_path / "logs")] if command == "grid" else [])]) == 2
    assert capsys.readouterr().err.strip() == f"cadence-bench {command}: {says}"
    assert not Path(tracking_uri.removeprefix("sqlite:///")).exists() and not (tmp_path / "logs").exists()


def test_a_method_that_cannot_work_is_refused_before_torchrun_starts(
    tiny_recipe_file: Any, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tiny_recipe_file(data="synthetic_text", model="hf/bert-tiny", max_length=16)
    assert main(["run", recipe, "--nproc", "2", "--methods", "cutout", "--tracking-uri", tracking_uri]) == 2
    assert "cutout" in capsys.readouterr().err.lower()
    assert not Path(tracking_uri.removeprefix("sqlite:///")).exists()


def test_an_in_process_grid_of_several_processes_is_refused(
    tiny_recipe_file: Any, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["grid", tiny_recipe_file(), "--nproc", "2", "--in-process", "--tracking-uri", tracking_uri])
    assert code == 2 and "drop --in-process" in capsys.readouterr().err


def test_more_processes_than_gpus_and_a_run_outside_its_torchrun_are_refused(tiny_recipe: Any) -> None:
    with pytest.raises(RecipeError, match="a GPU of its own"):
        require_processes(torch.cuda.device_count() + 1, "gpu")
    with pytest.raises(RecipeError, match="launches torchrun itself"):
        check_world(2)
    with pytest.raises(RecipeError, match="launches torchrun itself"):
        execute(RunSpec(tiny_recipe(nproc=2), (), 0), tracking_uri="sqlite:////nonexistent/never.db")


def _eval_metrics(uri: str, run_id: str) -> dict[str, float]:
    metrics = client(uri).get_run(run_id).data.metrics
    return {k: v for k, v in metrics.items() if k.startswith("metrics/eval/")}


@pytest.mark.slow  # two torchrun jobs of 2 processes: about 40 s each on 2 cores
def test_two_processes_train_as_one_with_the_whole_batch_and_log_one_run(
    tiny_recipe: Any, tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    reference = execute(RunSpec(tiny_recipe(**GROUPNORM), (), 0), tracking_uri=f"sqlite:///{tmp_path / 'one.db'}")
    expected = _eval_metrics(f"sqlite:///{tmp_path / 'one.db'}", reference.run_id)
    assert {"metrics/eval/MulticlassAccuracy", "metrics/eval/CrossEntropy"} <= set(expected)
    for flags, label in ((["--nproc", "2"], "ddp"), (["--nproc", "2", "--fsdp"], "fsdp:FULL_SHARD")):
        store = f"sqlite:///{tmp_path / (label.replace(':', '_') + '.db')}"
        assert main(["run", tiny_recipe_file(**GROUPNORM), "--tracking-uri", store, "--no-progress", *flags]) == 0
        runs = client(store).search_runs([client(store).get_experiment_by_name("tiny").experiment_id])
        assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # rank 1 logged nothing
        params = runs[0].data.params
        assert (params["world_size"], params["sharding"], params["nproc"]) == ("2", label, "2")
        measured = _eval_metrics(store, runs[0].info.run_id)
        assert measured.keys() == expected.keys()
        for key, value in expected.items():  # the gradients of two halves averaged: the whole batch's
            assert measured[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        job = client(store).get_run(runs[0].info.run_id).data.metrics
        assert job["final/flops"] == reference.metrics["final/flops"] > 0  # both halves counted, as one process
        assert job["cost/flops"] == reference.metrics["final/flops"]  # the last evaluation's point, too


@pytest.mark.slow  # one torchrun job of 2 processes
def test_a_grid_of_two_process_runs_records_each_run_once(
    tiny_recipe_file: Any, tracking_uri: str, records_elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["grid", tiny_recipe_file(**GROUPNORM), "--nproc", "2", "--tracking-uri", str(tracking_uri)]
    assert main([*command, "--log-dir", str(records_elsewhere.parent / "logs")]) == 0
    lines = (records_elsewhere / "tiny.jsonl").read_text().splitlines()
    assert len(lines) == 1
    (record,) = read_records([records_elsewhere / "tiny.jsonl"])
    assert (record.params["world_size"], record.params["sharding"]) == ("2", "ddp")
    assert json.loads(lines[0])["mlflow_run_id"] == record.run_id
    runs = client(tracking_uri).search_runs([client(tracking_uri).get_experiment_by_name("tiny").experiment_id])
    assert [r.info.run_id for r in runs] == [record.run_id]
    capsys.readouterr()
    assert main(command) == 0  # resumed: the finished run is found and skipped
    assert "1 already finished (skipped), 0 finished now" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_train_one_run_with_nccl(tiny_recipe_file: Any, tracking_uri: str) -> None:
    assert main(["run", tiny_recipe_file(), "--nproc", "2", "--device", "gpu", "--tracking-uri", tracking_uri]) == 0
    (run,) = client(tracking_uri).search_runs([client(tracking_uri).get_experiment_by_name("tiny").experiment_id])
    assert (run.info.status, run.data.params["world_size"], run.data.params["sharding"]) == ("FINISHED", "2", "ddp")
