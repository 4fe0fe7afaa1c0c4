"""`grid --estimate` from a study's own records: the baseline's rate on the device, seconds per evaluation, the
rest of fit, start-up from the gaps between runs, a configuration's own costs, and which source the output names."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from cadence_harness.records import RunRecord, records_file
from cadence_harness.running.estimate import estimate_grid
from cadence_harness.running.plan import expand
from cadence_harness.running.reference import MAX_GAP_S, reference_from_records, startup_gaps
from cadence_harness.running.run import environment
from cadence_harness.running.runspec import RunSpec

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
GRID = "cadence-bench grid study"


def record(
    spec: RunSpec,
    *,
    device: str,
    train_s: float,
    end_s: float,
    eval_s: float = 1.0,
    other_s: float = 0.5,
    flops: float = 1e15,
    evals: int = 2,
    command: str = GRID,
    gpu: bool = True,
    **params: str,
) -> RunRecord:
    """A finished run of `spec` on `device`: its fit lasted train_s + eval_s + other_s and ended at `end_s`."""
    wanted = {"model": "tv/resnet20", "data": "synthetic", "batch_size": str(spec.recipe.batch_size)}
    return RunRecord(
        run_id=f"{spec.run_name}-{device}-{end_s}",
        experiment=spec.experiment,
        tags={**spec.tags(), "cadence.command": command},
        params={**wanted, "precision": spec.recipe.resolved_precision, "device_name": device}
        | ({"cuda_driver": "580"} if gpu else {})
        | params,
        metrics={
            "final/train_s": train_s,
            "final/eval_s": eval_s,
            "final/wall_s": train_s + eval_s + other_s,
            "final/flops": flops,
        },
        evals=tuple({"step": i, "accuracy": 0.5} for i in range(evals)),
        end_time=int(end_s * 1000),
    )


@pytest.fixture
def study(tiny_recipe: Any) -> list[RunSpec]:
    return expand(tiny_recipe(name="study", methods={"label_smoothing": {}}, seeds=[0, 1, 2]))


def test_the_reference_reads_rate_evaluation_rest_of_fit_and_start_up_off_the_records(study: list[RunSpec]) -> None:
    base = [s for s in study if not s.arm]
    smoothing = next(s for s in study if s.arm)
    runs, end = [], 1000.0
    for spec, train_s, gap in zip(base, (10.0, 12.0, 14.0), (3.0, 5.0, 4.0)):
        end += gap + train_s + 1.5  # start-up, then the fit: training, 1 s of evaluation, 0.5 s of the rest
        runs.append(record(spec, device=H100, train_s=train_s, end_s=end))
    end += 2.0 + 20 + 1.5
    runs.append(record(smoothing, device=H100, train_s=20.0, end_s=end, flops=2e15))
    runs.append(record(base[0], device=H100, train_s=11.0, end_s=end + MAX_GAP_S + 40))  # a pause: no start-up
    runs.append(record(base[1], device=A100, train_s=30.0, end_s=end + 5000))  # another card
    together = [
        record(base[2], device=H100, train_s=9.0, end_s=end + 10_000 + k, command=f"{GRID} --jobs 2") for k in (0, 1)
    ]

    assert sorted(startup_gaps(runs + together)) == [2.0, 4.0, 5.0]  # the first run has no predecessor
    families = {s.family_hash for s in study}
    reference = reference_from_records(runs + together, experiment="study", families=families, like={}, device=H100)
    assert reference is not None and reference.same_family and reference.device == H100
    trained = [10.0, 12.0, 14.0, 11.0, 9.0, 9.0]
    assert reference.baseline_runs == 6 and reference.rate == pytest.approx(6e15 / sum(trained))
    assert reference.eval_s == pytest.approx(0.5) and reference.other_s == pytest.approx(0.5)  # 1 s over 2 evaluations
    assert reference.startup_s == pytest.approx(statistics.median([2.0, 4.0, 5.0])) and reference.gaps == 3
    own, recorded = reference.costs(smoothing.group_hash, 1e15, 2)
    assert recorded and own.total == pytest.approx(21.5)  # its own run, not the baseline's rate
    priced, recorded = reference.costs("another configuration", 1e15, 4)
    assert not recorded and priced.train_s == pytest.approx(sum(trained) / 6) and priced.eval_s == pytest.approx(2.0)
    assert "6 recorded runs of the grid's baseline configuration on NVIDIA H100 80GB HBM3" in reference.describe()

    without_gpu = reference_from_records(runs, experiment="study", families=families, like={}, device=None)
    assert without_gpu is not None and without_gpu.device == H100  # the GPU its records used most
    assert reference_from_records(runs, experiment="study", families=families, like={}, device="NVIDIA L4") is None


def test_an_earlier_baseline_configuration_stands_in_only_with_the_same_model_data_batch_and_precision(
    study: list[RunSpec],
) -> None:
    runs = [record(s, device=H100, train_s=10.0, end_s=100.0 * i) for i, s in enumerate(study) if not s.arm]
    like = {"model": "tv/resnet20", "data": "synthetic", "batch_size": "4", "precision": "fp32"}
    earlier = reference_from_records(runs, experiment="study", families={"a new configuration"}, like=like, device=H100)
    assert earlier is not None and not earlier.same_family and "an earlier baseline configuration" in earlier.describe()
    other = {**like, "batch_size": "512"}
    assert reference_from_records(runs, experiment="study", families={"new"}, like=other, device=H100) is None


def test_the_estimate_names_its_source(study: list[RunSpec], tmp_path: Path) -> None:
    recipe = study[0].recipe
    here = environment(torch.device("cpu"))["device_name"]
    measured = str(estimate_grid(recipe, study))
    assert "throughput measured here" in measured and "not counted: per-run start-up" in measured

    path = records_file(tmp_path, "study")
    other = [record(s, device="another CPU", train_s=1.0, end_s=10.0 * i, gpu=False) for i, s in enumerate(study)]
    path.write_text("".join(r.to_json() + "\n" for r in other))
    text = str(estimate_grid(recipe, study, records_dir=tmp_path))
    assert "throughput measured here" in text and "no finished baseline run of this model" in text and here in text

    mine = [record(s, device=here, train_s=2.0, end_s=10.0 * i, gpu=False) for i, s in enumerate(study[:3])]
    path.write_text("".join(r.to_json() + "\n" for r in mine))
    text = str(estimate_grid(recipe, study, records_dir=tmp_path))
    assert f"time from the study's records ({path})" in text and f"on {here}" in text
    assert "measured here" not in text and "recorded already: 3 of 6 runs" in text
    # the three recorded runs' configurations (baseline, label_smoothing) price all six runs by their own costs
    assert "6 runs priced by their configuration's own recorded runs, 0 at the baseline's rate" in text

    given = str(estimate_grid(recipe, study, records_dir=tmp_path, rate=5.0))
    assert "5.0 GFLOP/s (given with --rate)" in given and "recorded already in" in given

    elsewhere = [record(s, device="another CPU", train_s=1.0, end_s=100.0 + i, gpu=False) for i, s in enumerate(study)]
    path.write_text("".join(r.to_json() + "\n" for r in [*mine, *elsewhere[3:]]))
    assert "recorded already: 6 of 6 runs" in str(estimate_grid(recipe, study, records_dir=tmp_path))
    # --rerun-elsewhere: only the runs whose newest record ran here are done
    assert "recorded already: 3 of 6 runs" in str(estimate_grid(recipe, study, records_dir=tmp_path, machine=here))
    path.write_text("".join(r.to_json() + "\n" for r in [*mine, *elsewhere[:1]]))  # a newer run elsewhere counts
    assert "recorded already: 2 of 6 runs" in str(estimate_grid(recipe, study, records_dir=tmp_path, machine=here))
