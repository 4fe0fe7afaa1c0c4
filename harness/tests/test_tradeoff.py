"""Speedup at matched accuracy on hand-made curves: monotone interpolation, never extrapolated, a paired
t-interval on the per-seed log speedups checked against an independent computation, the accuracy floor
left out, verdicts (alone and Benjamini-Hochberg-adjusted), the Pareto front, and the cyclic curve against
the sweep."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from cadence_harness.reading.cyclic import cyclic_checks
from cadence_harness.reading.tradeoff import (
    Curve,
    Speedup,
    cost_to_reach,
    curves_from_records,
    floor_of,
    matched_speedups,
    pareto_points,
    verdict,
)
from cadence_harness.records import RunRecord, budget_value
from cadence_harness.testing import study_run

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
    assert speedups[0].format() == "2.00x [2.00, 2.00] n=3" and verdict(speedups).startswith("dominates")
    assert matched_speedups(arm, base, "train_s")[0].value == pytest.approx(2.0)


def _independent_t(arm_acc: np.ndarray, arm_cost: np.ndarray, j: int) -> tuple[float, float]:
    """The same paired t-interval, written out: each seed's speedup against its own baseline seed, t on the logs."""
    logs = []
    for seed in range(3):
        target, costs = arm_acc[seed, j], np.array(BASE_COST[seed])
        best = np.maximum.accumulate(np.array(BASE_ACC[seed]))
        k = int(np.argmax(best >= target))
        share = (target - best[k - 1]) / (best[k] - best[k - 1])
        needed = math.exp(math.log(costs[k - 1]) + share * (math.log(costs[k]) - math.log(costs[k - 1])))
        logs.append(math.log(needed / arm_cost[seed, j]))
    half = scipy_stats.t.ppf(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    return math.exp(statistics.mean(logs) - half), math.exp(statistics.mean(logs) + half)


def test_the_interval_is_a_paired_t_interval_on_the_per_seed_log_speedups() -> None:
    arm_acc = np.array([[0.66, 0.72], [0.64, 0.73], [0.68, 0.71]])
    arm_cost = np.array([[2.0, 4.0], [2.2, 4.1], [1.9, 3.8]])
    base = curve("baseline", BASE_ACC, BASE_COST)
    arm = curve("noisy", arm_acc.tolist(), arm_cost.tolist())
    speedups = matched_speedups(arm, base, "flops")
    for j, speedup in enumerate(speedups):
        low, high = _independent_t(arm_acc, arm_cost, j)
        assert speedup.low == pytest.approx(low) and speedup.high == pytest.approx(high)
        assert 0 < speedup.low <= speedup.value <= speedup.high  # a ratio's interval never reaches zero
        assert speedup.format() == f"{speedup.value:.2f}x [{low:.2f}, {high:.2f}] n=3"


def test_points_at_the_baseline_floor_are_left_out() -> None:
    """Every baseline seed at exactly 50% at 1ep (a constant prediction): an arm's point there says nothing."""
    flat = [[0.50, 0.60, 0.70, 0.75], [0.50, 0.61, 0.69, 0.76], [0.50, 0.59, 0.71, 0.74]]
    base = curve("baseline", flat, BASE_COST)
    assert floor_of(base) == 0.50 and floor_of(curve("baseline", BASE_ACC, BASE_COST)) is None
    arm = curve("stuck", [[0.50, 0.65]] * 3, [[1.0, 2.0]] * 3)
    stuck, moving = matched_speedups(arm, base, "flops", floor=floor_of(base))
    assert stuck.left_out and stuck.verdict == "unknown" and stuck.format().startswith("left out (at the baseline")
    assert not moving.left_out and moving.value is not None
    only = matched_speedups(curve("stuck", [[0.50]] * 3, [[1.0]] * 3), base, "flops", floor=0.5)
    assert verdict(only).startswith("left out (at the baseline's floor 50.00%")


def test_an_adjusted_cell_is_better_only_when_its_q_value_is_small() -> None:
    cell = Speedup("a", "1ep", "flops", 3, 1.3, "", 1.05, 1.6, p_up=0.01, p_down=0.99)
    assert cell.verdict == "better" and cell.p == pytest.approx(0.02)  # alone: the interval decides
    assert dataclasses.replace(cell, q=0.04).verdict == "better"
    assert dataclasses.replace(cell, q=0.2).verdict == "within noise"  # not after the family's correction
    assert "q=0.2" in dataclasses.replace(cell, q=0.2).format()
    slower = Speedup("a", "1ep", "flops", 3, 0.7, "", 0.5, 0.9, p_up=0.995, p_down=0.005)
    assert dataclasses.replace(slower, q=0.03).verdict == "worse"


def test_beyond_the_baseline_range_no_number_is_reported() -> None:
    base = curve("baseline", BASE_ACC, BASE_COST)
    better = curve("better", [[0.80, 0.85]] * 3, [[4.0, 8.0]] * 3)
    above = matched_speedups(better, base, "flops")
    assert all(s.value is None and s.beyond == "above" for s in above)
    assert above[0].format() == "beyond the baseline's range (above its best) [2.00, beyond range] n=3"
    assert above[0].verdict == "better" and above[1].verdict == "within noise"  # more than 8/4 = 2x; more than 8/8 = 1x
    worse = matched_speedups(curve("worse", [[0.30]] * 3, [[2.0]] * 3), base, "flops")
    assert worse[0].format() == "beyond the baseline's range (below its shortest budget) [beyond range, 0.50] n=3"
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


def _record(arm: str, budget: str, seed: int, accuracy: float) -> RunRecord:
    return study_run(arm, budget, seed, accuracy=accuracy, train_s=budget_value(budget) * 10)


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


def test_a_curve_cut_off_during_its_longest_budget_is_read_over_it_on_the_seeds_that_ran_it() -> None:
    """What the recipe search reads (`Curve.over`): a grid stopped after seed 0's 8ep leaves a curve that keeps
    1ep to 4ep on every seed; over 8ep it is seed 0's whole curve, over the budgets it keeps itself."""
    records = [_record("arm", b, s, 0.5 + 0.1 * i) for i, b in enumerate(BUDGETS[:3]) for s in range(3)]
    (curve,) = curves_from_records([*records, _record("arm", "8ep", 0, 0.9)])
    assert curve.whole is not None and (curve.whole.budgets, curve.whole.seeds) == (BUDGETS, [0])
    assert curve.whole.accuracy.tolist() == [[0.5, 0.6, 0.7, 0.9]] and "flops" in curve.whole.costs
    assert curve.over(BUDGETS) is curve.whole and curve.over(BUDGETS[:3]) is curve
    (complete,) = curves_from_records(records)
    assert complete.whole is None and complete.over(BUDGETS) is complete
