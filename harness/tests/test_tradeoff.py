"""Speedup at matched accuracy on hand-made curves: monotone interpolation, never extrapolated, a paired
bootstrap on the log scale checked against an independent computation, verdicts, the Pareto front, and
the cyclic curve against the sweep."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cadence_harness.reading.tradeoff import (
    Curve,
    Speedup,
    cost_to_reach,
    curves_from_records,
    cyclic_checks,
    matched_speedups,
    pareto_points,
    verdict,
)
from cadence_harness.records import TAG, RunRecord, budget_value

BUDGETS = ["1ep", "2ep", "4ep", "8ep"]


def curve(arm: str, accuracy: list[list[float]], cost: list[list[float]], cyclic: bool = False) -> Curve:
    """A curve of len(accuracy) seeds over len(accuracy[0]) budgets."""
    budgets = BUDGETS[: len(accuracy[0])]
    costs = np.array(cost, dtype=float)
    return Curve(
        arm=arm,
        curve_hash=f"{arm}-{cyclic}",
        baseline_curve_hash=f"baseline-{cyclic}",
        family_hash="family",
        cyclic=cyclic,
        budgets=budgets,
        seeds=list(range(len(accuracy))),
        accuracy=np.array(accuracy, dtype=float),
        costs={"flops": costs, "train_s": costs * 2},
    )


def test_the_baseline_cost_of_an_accuracy_is_read_off_its_monotone_curve() -> None:
    costs, accuracy = [1.0, 2.0, 4.0, 8.0], [0.50, 0.60, 0.70, 0.75]
    assert cost_to_reach(costs, accuracy, 0.60) == (2.0, "")
    assert cost_to_reach(costs, accuracy, 0.65) == (pytest.approx(2 * math.sqrt(2)), "")  # halfway in log cost
    assert cost_to_reach(costs, accuracy, 0.50) == (1.0, "")
    assert cost_to_reach(costs, accuracy, 0.76) == (None, "above")  # never extrapolated
    assert cost_to_reach(costs, accuracy, 0.49) == (None, "below")
    dip = [0.50, 0.70, 0.65, 0.75]  # a longer budget that ended lower is never needed
    assert cost_to_reach(costs, dip, 0.68) == (pytest.approx(2**0.9), "")
    assert cost_to_reach(costs, dip, 0.70) == (2.0, "")
    assert cost_to_reach(costs, dip, 0.72) == (pytest.approx(4 * 2**0.4), "")  # flat from 2 to 4, then up to (8, 0.75)
    assert cost_to_reach([8.0, 1.0, 4.0, 2.0], [0.75, 0.50, 0.70, 0.60], 0.65)[0] == pytest.approx(2 * math.sqrt(2))


BASE_ACC = [[0.50, 0.60, 0.70, 0.75], [0.52, 0.61, 0.69, 0.76], [0.49, 0.62, 0.71, 0.74]]
BASE_COST = [[1.0, 2.0, 4.0, 8.0]] * 3


def test_an_arm_reaching_the_baseline_accuracy_at_half_the_cost_is_a_2x_speedup() -> None:
    base = curve("baseline", BASE_ACC, BASE_COST)
    arm = curve(
        "fast", [row[1:] for row in BASE_ACC], [[1.0, 2.0, 4.0]] * 3
    )  # each budget's accuracy, one step earlier
    speedups = matched_speedups(arm, base, "flops")
    assert [s.value for s in speedups] == [pytest.approx(2.0)] * 3
    assert all(s.low == pytest.approx(2.0) and s.high == pytest.approx(2.0) for s in speedups)  # seeds move together
    assert speedups[0].format() == "2.00x [2.00, 2.00]" and verdict(speedups).startswith("dominates")
    assert matched_speedups(arm, base, "train_s")[0].value == pytest.approx(2.0)


def _independent_bootstrap(arm_acc: np.ndarray, arm_cost: np.ndarray, j: int) -> tuple[float, float]:
    """The same paired bootstrap, written out: resample seeds, speedup per resample, percentiles of its log."""
    base_acc, base_cost = np.array(BASE_ACC), np.array(BASE_COST)
    index = np.random.default_rng(0).integers(0, 3, size=(10_000, 3))
    logs = []
    for rows in index:
        target = arm_acc[rows, j].mean()
        best = np.maximum.accumulate(base_acc[rows].mean(0))
        costs = base_cost[rows].mean(0)
        k = int(np.argmax(best >= target))
        share = (target - best[k - 1]) / (best[k] - best[k - 1])
        needed = math.exp(math.log(costs[k - 1]) + share * (math.log(costs[k]) - math.log(costs[k - 1])))
        logs.append(math.log(needed / arm_cost[rows, j].mean()))
    low, high = np.quantile(logs, [0.025, 0.975])
    return math.exp(low), math.exp(high)


def test_the_interval_is_a_paired_percentile_bootstrap_on_the_log_scale() -> None:
    arm_acc = np.array([[0.66, 0.72], [0.64, 0.73], [0.68, 0.71]])
    arm_cost = np.array([[2.0, 4.0], [2.2, 4.1], [1.9, 3.8]])
    base = curve("baseline", BASE_ACC, BASE_COST)
    arm = curve("noisy", arm_acc.tolist(), arm_cost.tolist())
    speedups = matched_speedups(arm, base, "flops")
    for j, speedup in enumerate(speedups):
        low, high = _independent_bootstrap(arm_acc, arm_cost, j)
        assert speedup.low == pytest.approx(low) and speedup.high == pytest.approx(high)
        assert 0 < speedup.low <= speedup.value <= speedup.high  # a ratio's interval never reaches zero
        assert speedup.format() == f"{speedup.value:.2f}x [{low:.2f}, {high:.2f}]"


def test_beyond_the_baseline_range_no_number_is_reported() -> None:
    base = curve("baseline", BASE_ACC, BASE_COST)
    better = curve("better", [[0.80, 0.85]] * 3, [[4.0, 8.0]] * 3)
    above = matched_speedups(better, base, "flops")
    assert all(s.value is None and s.beyond == "above" for s in above)
    assert above[0].format() == "beyond the baseline's range (above its best) [2.00, beyond range]"
    assert above[0].verdict == "better" and above[1].verdict == "within noise"  # more than 8/4 = 2x; more than 8/8 = 1x
    worse = matched_speedups(curve("worse", [[0.30]] * 3, [[2.0]] * 3), base, "flops")
    assert worse[0].format() == "beyond the baseline's range (below its shortest budget) [beyond range, 0.50]"
    assert worse[0].verdict == "worse"


def test_one_seed_gives_no_speedup() -> None:
    base = curve("baseline", BASE_ACC[:1], BASE_COST[:1])
    arm = curve("one", [[0.6]], [[1.0]])
    (speedup,) = matched_speedups(arm, base, "flops")
    assert speedup.value is None and speedup.low is None
    assert speedup.format() == "— (1 seed: no interval)" and "x" not in speedup.format()
    assert verdict([speedup]) == "— (needs 2 seeds)"


def test_verdicts() -> None:
    def point(low: float, high: float) -> Speedup:
        return Speedup("a", "b", "flops", 3, (low + high) / 2, "", low, high)

    better, worse, tie = point(1.2, 1.5), point(0.5, 0.8), point(0.9, 1.1)
    assert verdict([better, better]).startswith("dominates")
    assert verdict([worse, worse]).startswith("dominated")
    assert verdict([better, tie, worse]).startswith("crosses")
    assert verdict([tie, tie]).startswith("within noise")
    assert verdict([better, tie]) == "better at b; within noise at the other 1"


def test_the_pareto_front_runs_over_every_arm_and_budget() -> None:
    base = curve("baseline", BASE_ACC, BASE_COST)
    arm = curve("arm", [[0.65, 0.80]] * 3, [[3.0, 16.0]] * 3)
    front = pareto_points([base, arm], "flops")
    assert [(a, b) for a, b, _, _ in front] == [
        ("baseline", "1ep"),
        ("baseline", "2ep"),
        ("arm", "1ep"),
        ("baseline", "4ep"),
        ("baseline", "8ep"),
        ("arm", "2ep"),
    ]


def test_a_cyclic_curve_is_on_the_front_only_where_its_arm_has_no_sweep() -> None:
    """The baseline's cyclic curve checks its sweep: a better point of it is no method's, so it stays off."""
    lucky = curve("baseline", [[0.60, 0.90]] * 3, [[1.0, 2.0]] * 3, cyclic=True)
    front = pareto_points([curve("baseline", BASE_ACC, BASE_COST), lucky], "flops")
    assert front and all(label == "baseline" for label, *_ in front)
    alone = pareto_points([lucky], "flops")  # an arm run only cyclically: its curve is all there is
    assert [label for label, *_ in alone] == ["baseline (cyclic)", "baseline (cyclic)"]


def test_the_cyclic_curve_is_checked_against_the_sweep() -> None:
    sweep = curve("baseline", BASE_ACC, BASE_COST)
    shifted = [[a - 0.01 for a in row] for row in BASE_ACC]
    cyclic = curve("baseline", shifted, BASE_COST, cyclic=True)
    (check,) = cyclic_checks([sweep, cyclic]).values()
    assert check.budgets == BUDGETS
    assert all(d.mean == pytest.approx(-0.01) for d in check.differences)
    text = check.format()
    assert text.startswith("cyclic - sweep accuracy on the baseline (n=3): 1ep: -1.00 ± 0.00 pp")
    assert "Mean |Δ| 1.00 pp" in text


def test_seed_resamples_are_each_computed_once() -> None:
    from cadence_harness.reading.tradeoff import _resamples

    rows, counts = _resamples(3, 10_000, 0)
    assert len(rows) <= math.comb(5, 3) and counts.sum() == 10_000
    assert {tuple(r) for r in rows} <= set(itertools.combinations_with_replacement(range(3), 3))


def _record(arm: str, budget: str, seed: int, accuracy: float) -> RunRecord:
    cost = budget_value(budget)
    tags = {"arm": arm, "seed": str(seed), "budget": budget, "curve_hash": f"curve-{arm}"}
    return RunRecord(
        run_id=f"{arm}-{budget}-s{seed}",
        experiment="study",
        tags={f"{TAG}{key}": value for key, value in {**tags, "baseline_curve_hash": "curve-baseline"}.items()},
        params={"duration": budget},
        metrics={"final/accuracy": accuracy, "final/flops": cost * 1e12, "final/train_s": cost * 10},
    )


def test_a_grid_still_running_its_longest_budget_keeps_its_finished_budgets_with_every_seed() -> None:
    # three seeds at 1ep, 2ep and 4ep; 8ep run for seed 0 only so far: the curve keeps 3 seeds over the
    # three finished budgets (not 1 seed over 4, which would leave no interval) and says what it left out
    records = [_record("baseline", b, s, 0.5 + 0.1 * i) for i, b in enumerate(BUDGETS[:3]) for s in range(3)]
    records.append(_record("baseline", "8ep", 0, 0.9))
    (curve,) = curves_from_records(records)
    assert (curve.budgets, curve.seeds, curve.left_out) == (BUDGETS[:3], [0, 1, 2], {"8ep": 1})
    # once every seed has it, the budget joins the curve
    (curve,) = curves_from_records([*records, _record("baseline", "8ep", 1, 0.9), _record("baseline", "8ep", 2, 0.9)])
    assert (curve.budgets, curve.seeds, curve.left_out) == (BUDGETS, [0, 1, 2], {})
    # a seed that has only the shortest budget does not cost the curve its other budgets
    (curve,) = curves_from_records([*records, _record("baseline", "1ep", 3, 0.5)])
    assert (curve.budgets, curve.seeds) == (BUDGETS[:3], [0, 1, 2])
    # one seed everywhere: the one curve there is
    (curve,) = curves_from_records([r for r in records if r.seed == 0])
    assert (curve.budgets, curve.seeds, curve.left_out) == (BUDGETS, [0], {})
