"""Grids: expansion, sharding, run identity, and a real 4-run grid where one run crashes."""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from cadence_harness.running.grid import parse_shard, run_grid, select_shard
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import Recipe, RecipeError
from cadence_harness.running.runspec import RunSpec


def unvalidated(arms: list[str], combinations: list[list[str]] | None = None, seeds: tuple[int, ...] = (0,)) -> Recipe:
    """A recipe built directly (no registry needed): expansion only reads names."""
    return Recipe(
        name="g",
        model="tv/resnet20",
        data="synthetic",
        duration="1ep",
        seeds=seeds,
        methods={"a": {}, "b": {"k": 1}, "c": {}},
        grid={"arms": arms, "methods": ["a", "b", "c"], "combinations": combinations or []},
    )


def arms_of(recipe: Recipe) -> list[str]:
    return [spec.arm_name for spec in expand(recipe) if spec.seed == recipe.seeds[0]]


def test_arms_expand_as_named() -> None:
    assert arms_of(unvalidated(["baseline", "each"])) == ["baseline", "a", "b", "c"]
    assert arms_of(unvalidated(["leave_one_out"])) == ["b+c", "a+c", "a+b"]
    assert arms_of(unvalidated(["pairs"])) == ["a+b", "a+c", "b+c"]
    assert arms_of(unvalidated(["all"], [["c", "a"], ["b"]])) == ["a+b+c", "c+a", "b"]
    assert arms_of(unvalidated(["pairs", "leave_one_out"])) == ["a+b", "a+c", "b+c"]  # the same sets once


def test_runs_are_seed_major_and_shards_partition_the_grid() -> None:
    specs = expand(unvalidated(["baseline", "each"], seeds=(0, 1, 2)))
    assert [s.seed for s in specs[:4]] == [0, 0, 0, 0] and len(specs) == 12
    shards = [select_shard(specs, i, 3) for i in (1, 2, 3)]
    assert sorted(s.run_name for shard in shards for s in shard) == sorted(s.run_name for s in specs)
    assert all(len(shard) == 4 for shard in shards)
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1-2", "x"):
        with pytest.raises(RecipeError, match=r"`--shard`"):
            parse_shard(bad)


def test_run_identity_is_stable_and_separates_seeds_from_arms() -> None:
    recipe = unvalidated(["each"])
    first, again = RunSpec(recipe, ("b",), 0), RunSpec(unvalidated(["baseline"]), ("b",), 0)
    assert first.config_hash == again.config_hash  # the grid layout is not part of a run's identity
    other_seed = RunSpec(recipe, ("b",), 1)
    assert other_seed.config_hash != first.config_hash and other_seed.group_hash == first.group_hash
    assert first.baseline_hash == RunSpec(recipe, (), 5).group_hash
    assert first.config()["methods"] == [{"name": "b", "k": 1}]


def test_a_runs_identity_is_pinned_so_committed_records_keep_matching(tiny_recipe: Any) -> None:
    """Committed run records (method_cards/runs/*.jsonl) are matched to a study's grid by this hash: a new
    recipe setting that enters every run's identity silently orphans every record. Adding `task` did
    that (the 35 runs of cifar10_resnet20_study recorded before it no longer match). If this fails,
    keep the old hash for existing recipes (leave a new setting out of the identity at its default)
    or say in the change which studies must run again."""
    assert RunSpec(tiny_recipe(), (), 0).config_hash == "0ff5860ce6bd72ae"


def test_a_spec_survives_the_trip_to_a_worker(tiny_recipe: Any) -> None:
    spec = RunSpec(tiny_recipe(seeds=[3]), (), 3)
    assert RunSpec.from_json(spec.to_json()) == spec


@pytest.mark.slow
def test_a_crashing_run_is_recorded_failed_and_retried_on_rerun(
    tracking_uri: str, tiny_recipe: Any, explode_plugin: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    recipe = tiny_recipe(
        name="grid4", seeds=[1], methods={"explode": {"on_seed": 1}}, grid={"arms": ["baseline", "each"]}
    )  # two runs side by side (jobs=2): the baseline finishes while the explode arm's worker dies
    monkeypatch.setenv("CADENCE_TEST_EXPLODE", "1")  # explode-s1 kills its process mid-run
    temporary = tmp_path / "tmp"  # this process's and, unless the grid gives them their own, its workers'
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    options = {"tracking_uri": tracking_uri, "log_dir": tmp_path / "logs", "command": "test", "progress": False}
    first = run_grid(recipe, jobs=2, **options)
    assert first.planned == 2 and len(first.finished) == 1 and not first.skipped
    assert [spec.run_name for spec, _ in first.failed] == ["explode-s1"], first.failed
    assert "exited with code 7" in first.failed[0][1]

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("grid4").experiment_id
    runs = client.search_runs([experiment])
    assert Counter(r.info.status for r in runs) == {"FINISHED": 1, "FAILED": 1}
    (failed,) = [r for r in runs if r.info.status == "FAILED"]
    assert failed.info.run_name == "explode-s1" and "code 7" in failed.data.tags["cadence.error"]
    assert any(a.path.endswith(".log") for a in client.list_artifacts(failed.info.run_id))
    assert not list(temporary.rglob("cadence-mlflow-*"))  # the killed worker's staged artifacts went with its folder
    assert {r.data.tags["cadence.grid"] for r in runs} == {next(iter(runs)).data.tags["cadence.grid"]}

    monkeypatch.delenv("CADENCE_TEST_EXPLODE")  # the retried run now succeeds
    second = run_grid(recipe, **options)
    assert len(second.skipped) == 1 and [s.run_name for s in second.finished] == ["explode-s1"] and not second.failed
    runs = client.search_runs([experiment])
    assert Counter(r.info.status for r in runs) == {"FINISHED": 2, "FAILED": 1}
    hashes = Counter(r.data.tags["cadence.config_hash"] for r in runs)
    assert sorted(hashes.values()) == [1, 2]  # the failed configuration ran twice, under the same hash
