"""An in-process grid (every run in the grid's process, data resident) equals a process-per-run grid bitwise."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from cadence_harness.running import resident
from cadence_harness.running.grid import run_grid
from cadence_harness.running.plan import expand

COMPARED = ("loss/train/total", "metrics/eval/MulticlassAccuracy", "final/accuracy", "final/flops", "cost/flops")


def histories(uri: str, experiment: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{config hash: {metric: [(step, value), ...]}}`` of the experiment's finished runs."""
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([experiment_id], filter_string="attributes.status = 'FINISHED'")
    return {
        run.data.tags["cadence.config_hash"]: {
            key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] for key in COMPARED
        }
        for run in runs
    }


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Any:
    """One CPU thread here and in worker processes: a float sum over 2 threads may be ordered differently, and
    other tests in this process may have changed torch's thread count."""
    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_same_seeds_give_bitwise_equal_metrics_in_process_and_in_worker_processes(
    tiny_recipe: Any, tmp_path: Any, one_thread: Any
) -> None:
    # An arm that draws random numbers of its own and changes batches (MixUp's mixing, CutOut's holes), then the
    # baseline: the second run in the grid's process starts where the first left the process (its RNGs, the
    # resident data), and must still equal its run in a fresh process. Seed 1: not the recipe's default 0.
    recipe = tiny_recipe(
        name="inproc",
        seeds=[1],
        duration="2ep",
        methods={"mixup": {"alpha": 0.4}, "cutout": {}},
        grid={"arms": ["all", "baseline"]},
    )
    assert [spec.arm for spec in expand(recipe)] == [("mixup", "cutout"), ()]
    options = {"log_dir": tmp_path / "logs", "command": "test", "progress": False}
    isolated_uri, here_uri = f"sqlite:///{tmp_path}/isolated.db", f"sqlite:///{tmp_path}/here.db"
    isolated = run_grid(recipe, tracking_uri=isolated_uri, isolate=True, **options)
    resident.clear()
    here = run_grid(recipe, tracking_uri=here_uri, isolate=False, **options)
    assert len(isolated.finished) == len(here.finished) == 2 and not isolated.failed and not here.failed
    expected, got = histories(isolated_uri, "inproc"), histories(here_uri, "inproc")
    assert set(expected) == set(got) and len(expected) == 2
    for config_hash, metrics in expected.items():
        assert all(metrics[key] for key in ("loss/train/total", "final/accuracy"))
        assert got[config_hash] == metrics, config_hash  # every step's loss and every evaluation, bitwise


def test_a_run_that_raises_in_process_is_recorded_failed_and_the_grid_goes_on(
    tiny_recipe: Any, explode_plugin: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    recipe = tiny_recipe(
        name="inproc_fail", seeds=[0, 1], methods={"explode": {"on_seed": 1, "how": "raise"}},
        grid={"arms": ["baseline", "each"]},
    )  # fmt: skip
    monkeypatch.setenv("CADENCE_TEST_EXPLODE", "1")
    uri = f"sqlite:///{tmp_path}/fail.db"
    result = run_grid(recipe, tracking_uri=uri, isolate=False, log_dir=tmp_path, command="test", progress=False)
    assert [spec.run_name for spec, _ in result.failed] == ["explode-s1"] and len(result.finished) == 3
    assert "exploded on purpose" in result.failed[0][1]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("inproc_fail").experiment_id])
    assert Counter(r.info.status for r in runs) == {"FINISHED": 3, "FAILED": 1}


def test_a_time_limit_leaves_the_rest_of_the_grid_for_the_next_call(tiny_recipe: Any, tmp_path: Any) -> None:
    recipe = tiny_recipe(name="inproc_limit", seeds=[0, 1, 2])
    options = {"log_dir": tmp_path, "command": "test", "progress": False, "isolate": False}
    uri = f"sqlite:///{tmp_path}/limit.db"
    first = run_grid(recipe, tracking_uri=uri, time_limit_s=1e-9, **options)  # past the limit after no run
    assert len(first.finished) + len(first.not_started) == 3 and first.not_started
    assert "not started (time limit" in first.summary()
    second = run_grid(recipe, tracking_uri=uri, **options)
    assert len(second.skipped) == len(first.finished) and len(second.finished) == len(first.not_started)


def test_in_process_refuses_what_only_processes_can_do(tiny_recipe: Any) -> None:
    with pytest.raises(ValueError, match="cannot be timed out or run in parallel"):
        run_grid(tiny_recipe(), isolate=False, timeout_s=10, progress=False)
    with pytest.raises(ValueError, match="time_limit_s=0 must be > 0"):
        run_grid(tiny_recipe(), time_limit_s=0, progress=False)


def test_the_process_warm_up_trains_one_epoch_and_records_nothing(
    tiny_recipe: Any, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cadence_harness.running import run
    from cadence_harness.running.runners import warm_up_process
    from cadence_harness.running.runspec import RunSpec

    durations: list[str] = []
    real = run.execute
    monkeypatch.setattr(run, "execute", lambda spec, **kw: durations.append(spec.recipe.duration) or real(spec, **kw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    assert warm_up_process(RunSpec(tiny_recipe(duration="3ep"), (), 0)) > 0
    assert durations == ["1ep"]
    assert MlflowClient(tracking_uri).get_experiment_by_name("tiny") is None  # nothing in the grid's store
