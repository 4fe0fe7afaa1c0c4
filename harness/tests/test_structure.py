"""The harness does each thing once: validation, method construction, the recipe loader, the end of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from cadence.loggers import MLFlowLogger
from cadence_harness import cli
from cadence_harness.cli import main
from cadence_harness.running import recipe, run
from cadence_harness.running.grid import check_arms
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import load_recipe
from cadence_harness.running.runspec import RunSpec


def test_each_method_is_built_once_by_validation_and_once_per_run(
    counted: list[int], tracking_uri: str, tiny_recipe_file: Any
) -> None:
    args = [
        "run",
        tiny_recipe_file(),
        "--methods",
        "count",
        "--seeds",
        "2",
        "--tracking-uri",
        tracking_uri,
        "--no-progress",
    ]
    assert main(args) == 0
    assert len(counted) == 3  # validation (its instance also answers repr and applicability), then one per seed


def test_a_grid_checks_its_arms_with_the_instances_validation_built(counted: list[int], tiny_recipe: Any) -> None:
    grid = tiny_recipe(seeds=[0, 1], grid={"arms": ["baseline", "each", "all"], "methods": ["count", "tuples_only"]})
    assert len(counted) == 1
    check_arms(grid, expand(grid))  # builds the model and data, asks each method once
    assert len(counted) == 1


def test_a_worker_rebuilds_its_spec_without_validating(
    counted: list[int], tiny_recipe: Any, tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = RunSpec(tiny_recipe(methods={"count": {"step": 2}}, seeds=[1]), ("count",), 1)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    del counted[:]

    def no_validation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a worker must not validate the recipe again")

    monkeypatch.setattr(recipe, "parse_recipe", no_validation)
    assert RunSpec.from_json(spec.to_json()) == spec
    assert main(["worker", str(spec_file), "--tracking-uri", tracking_uri]) == 0
    assert len(counted) == 1  # the run's own instance, nothing else


def test_one_loader_serves_files_values_and_flags(tiny_recipe_file: Any, explode_plugin: Any) -> None:
    assert not hasattr(cli, "_recipe")  # the command line has no loader of its own
    from_file = load_recipe(tiny_recipe_file(), {"batch_size": 2}, methods=["TuplesOnly"])
    assert from_file.batch_size == 2 and from_file.methods == {"tuples_only": {}}
    values = {k: v for k, v in from_file.to_dict().items() if k != "source"}
    assert load_recipe(values, source=from_file.source) == from_file
    flags = load_recipe(None, {"model": "tv/resnet20", "data": "synthetic", "duration": "1ba"}, name="e")
    assert flags.name == "e" and flags.source == "command line"


def test_data_and_model_are_built_apart(tiny_recipe: Any) -> None:
    image = tiny_recipe()
    data = run.build_data(image, 0, torch.device("cpu"), None, False)
    images, labels = next(iter(data.train))
    assert (
        images.shape == (4, 3, 32, 32) and labels.dtype == torch.int64 and data.dataset.source.startswith("synthetic")
    )
    assert run.build_model(image, data)((images, labels)).shape == (4, 10)

    text = tiny_recipe(model="hf/bert-tiny", data="synthetic_text", max_length=16)
    data = run.build_data(text, 0, torch.device("cpu"), None, False)
    batch = next(iter(data.train))
    assert set(batch) == {"input_ids", "attention_mask", "labels"} and data.tokenizer is not None
    assert run.build_model(text, data)(batch).logits.shape == (4, 2)


class FinishCounter:
    """Wraps `MLFlowLogger.finish` to record every call's status."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[str] = []
        original = MLFlowLogger.finish

        def finish(logger: Any, status: str = "FINISHED", error: BaseException | None = None, **kwargs: Any) -> None:
            self.calls.append(status)
            original(logger, status, error, **kwargs)

        monkeypatch.setattr(MLFlowLogger, "finish", finish)


def _only_run(tracking_uri: str) -> Any:
    client = MlflowClient(tracking_uri)
    (only,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    return only


def test_the_trainer_ends_the_run_once(tracking_uri: str, tiny_recipe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    finishes = FinishCounter(monkeypatch)
    run.execute(RunSpec(tiny_recipe(), (), 0), tracking_uri=tracking_uri, progress_bar=False)
    assert finishes.calls == ["FINISHED"] and _only_run(tracking_uri).info.status == "FINISHED"


def test_a_method_failing_mid_training_ends_the_run_failed_once(
    tracking_uri: str, tiny_recipe: Any, explode_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    finishes = FinishCounter(monkeypatch)
    monkeypatch.setenv("CADENCE_TEST_EXPLODE", "1")
    spec = RunSpec(tiny_recipe(methods={"explode": {"on_seed": 0, "how": "raise"}}), ("explode",), seed=0)
    with pytest.raises(Exception, match="exploded on purpose"):
        run.execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    failed = _only_run(tracking_uri)
    assert finishes.calls == ["FAILED"] and failed.info.status == "FAILED"
    assert "exploded on purpose" in failed.data.tags["cadence.error"]


def test_before_the_trainer_the_harness_ends_the_run(
    tracking_uri: str, tiny_recipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    finishes = FinishCounter(monkeypatch)

    def broken(device: Any) -> dict[str, str]:
        raise OSError("cannot read the machine")

    monkeypatch.setattr(run, "environment", broken)
    with pytest.raises(OSError, match="cannot read the machine"):
        run.execute(RunSpec(tiny_recipe(), (), 0), tracking_uri=tracking_uri, progress_bar=False)
    failed = _only_run(tracking_uri)
    assert finishes.calls == ["FAILED"] and failed.info.status == "FAILED"
    assert "cannot read the machine" in failed.data.tags["cadence.error"]


def test_data_that_fails_to_load_leaves_no_run(
    tracking_uri: str, tiny_recipe: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("no data")

    monkeypatch.setattr(run.datasets, "load_dataset", missing)
    with pytest.raises(FileNotFoundError):
        run.execute(RunSpec(tiny_recipe(), (), 0), tracking_uri=tracking_uri, progress_bar=False)
    assert not (tmp_path / "mlflow.db").exists()  # the MLflow run is created only once data, model and methods exist
