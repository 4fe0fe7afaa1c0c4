"""Run records for tests of the reading side: a study's finished runs as their record lines hold them, built
without MLflow and without training, so a test states only the numbers it is about."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cadence_harness.records import TAG, RunRecord, budget_value

__all__ = ["study_run"]


def study_run(
    arm: str,
    budget: str,
    seed: int,
    *,
    accuracy: float,
    train_s: float,
    length: str = "",
    params: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
    evals: Sequence[dict[str, float]] = (),
    experiment: str = "study",
) -> RunRecord:
    """`arm`'s run at `budget` for `seed`, with the tags the reading side groups runs by: its configuration
    (``ARM-BUDGET-sSEED``, also the run id), its budget group, the baseline's group at that budget, its curve, the
    baseline's curve and one family, so that any such runs form one sweep study.

    `length` is what the run computed (``max_duration``; default `budget`): an arm that trains less than its
    budget, like Scale Schedule, sets it. FLOPs are 1e12 per unit of `length`; `params` and `metrics` add to (or
    replace) the defaults."""
    length = length or budget
    tags = {
        "arm": arm,
        "seed": str(seed),
        "budget": budget,
        "family_hash": "family",
        "config_hash": f"{arm}-{budget}-s{seed}",
        "group_hash": f"{arm}-{budget}",
        "baseline_hash": f"baseline-{budget}",
        "curve_hash": f"curve-{arm}",
        "baseline_curve_hash": "curve-baseline",
    }
    final = {"final/accuracy": accuracy, "final/flops": budget_value(length) * 1e12, "final/train_s": train_s}
    return RunRecord(
        run_id=f"{arm}-{budget}-s{seed}",
        experiment=experiment,
        tags={f"{TAG}{key}": value for key, value in tags.items()},
        params={"duration": budget, "max_duration": length, "device": "cpu", **(params or {})},
        metrics={**final, **(metrics or {})},
        evals=tuple(evals),
    )
