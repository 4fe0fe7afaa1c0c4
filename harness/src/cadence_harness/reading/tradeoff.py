"""Tradeoff curves, speedup at matched accuracy, verdicts, the Pareto front, and the cyclic check.

A curve is one arm's final accuracy at each budget, against what the budget cost (training
FLOPs, training time, process CPU time), per seed. The speedup of an arm's point is the cost the
baseline's curve needs to reach the point's accuracy divided by the point's cost (MosaicML's
methodology). The baseline's cost for an accuracy is read off its mean curve made monotone (at
each cost the best accuracy reached at or below it: a longer budget that ends lower is never
needed) and interpolated linearly in accuracy against log cost between its budgets (budgets are
geometric). It is never extrapolated: an accuracy above the baseline's best or below its shortest
budget is "beyond the baseline's range", and only a bound is known (the baseline would need more
than its longest budget, or less than its shortest).

The interval is a paired Student-t interval on the log speedups of the seeds (an arm and its baseline
share a seed's data order and initialisation): seed i's speedup reads the arm's seed-i point against
the baseline's seed-i curve, and ``exp(mean ± t(0.975, n-1) · s / √n)`` of their logs bounds it, so it
never crosses zero (`cadence_harness.stats`: the same family as every other paired comparison).
A seed beyond the baseline's range enters with its bound on the side where the bound is safe, and
leaves the other side unbounded. The point is the speedup of the mean curves (MosaicML's figure).
With one seed there is no interval and no speedup is reported.

A point at the section's *floor* (an accuracy every seed of the baseline reports exactly at some
budget: a constant prediction, chance or a plateau, e.g. BERT's 50.92% on SST-2 at 40 batches) is
left out: matching accuracy there says nothing about speed.

A point is *better* when its speedup is significantly above 1, *worse* when significantly below,
else *within noise*. Read alone, significant means the 95% interval excludes 1; in a section, the
two-sided p-values of all its cells are adjusted together (Benjamini-Hochberg,
`cadence_harness.reading.summaries.sections_of`) and significant means q < 0.05. An arm *dominates*
the baseline when every budget is better, is *dominated* when every budget is worse, and *crosses*
it when some budgets are better and others worse.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cadence_harness.records import RunRecord, budget_value, same_machine
from cadence_harness.stats import (
    Interval,
    log_t_interval,
    paired_log_interval,
    t_interval,
)

__all__ = [
    "COSTS",
    "SIGNIFICANCE",
    "Curve",
    "Speedup",
    "cost_to_reach",
    "curves_from_records",
    "matched_speedups",
    "paired_by_seed",
    "pareto_front",
    "pareto_points",
    "verdict",
]

COSTS = {"flops": "FLOPs", "train_s": "training time", "cpu_s": "CPU time"}  # unit -> what it is
TIMED = ("train_s", "cpu_s")  # the units that are times: compared only within one machine
SIGNIFICANCE = 0.05  # a (corrected) p-value below it is "better" or "worse"
_FINAL = {"flops": "final/flops", "train_s": "final/train_s", "cpu_s": "final/cpu_s"}


@dataclass
class Curve:
    """One arm's accuracy and costs at each of its budgets, per seed (rows: seeds, columns: budgets)."""

    arm: str
    curve_hash: str
    baseline_curve_hash: str
    family_hash: str
    cyclic: bool
    budgets: list[str]
    seeds: list[int]
    accuracy: np.ndarray
    costs: dict[str, np.ndarray]
    run_ids: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)  # budget -> seeds run so far, where not every seed is
    machine: str | None = ""  # the one machine its runs ran on (`same_machine`); None: several
    # where `left_out` holds budgets: the curve over all its budgets, on the seeds that ran them all (`over`)
    whole: Curve | None = None

    @property
    def n(self) -> int:
        return len(self.seeds)

    def over(self, budgets: Sequence[str]) -> Curve:
        """This curve over `budgets` where it keeps fewer of them than its runs reached: a grid stopped (or still
        running) during its longer budgets leaves them to some seeds only, and read over the others the curve
        would end early. Then it is its `whole` curve, on the seeds that ran them all; else itself."""
        if self.whole is not None and not set(budgets) <= set(self.budgets):
            return self.whole
        return self

    @property
    def label(self) -> str:
        return f"{self.arm} (cyclic)" if self.cyclic else self.arm

    def accuracy_interval(self, index: int) -> Interval:
        return t_interval(self.accuracy[:, index])

    def cost_interval(self, unit: str, index: int) -> Interval:
        return log_t_interval(self.costs[unit][:, index])


def _points(record: RunRecord) -> dict[str, tuple[float, dict[str, float]]]:
    """budget -> (accuracy, costs) of one run: its end for a sweep run, each cycle's end for a cyclic one."""
    if not record.cycles:
        if "final/accuracy" not in record.metrics:
            return {}
        costs = {unit: record.metrics[key] for unit, key in _FINAL.items() if key in record.metrics}
        return {record.budget: (record.metrics["final/accuracy"], costs)}
    points = {}
    for point in record.evals:
        cycle = int(point.get("cycle_end", 0))
        if 1 <= cycle <= len(record.cycles) and "accuracy" in point:
            costs = {unit: float(point[unit]) for unit in COSTS if unit in point}
            points[record.cycles[cycle - 1]] = (float(point["accuracy"]), costs)
    return points


def curves_from_records(records: Sequence[RunRecord]) -> list[Curve]:
    """The curves of `records` (one per curve hash), each over the seeds it has at every one of its budgets
    (`_complete_budgets`; the budgets it leaves out are in `Curve.left_out`, and its curve over them, on the seeds
    that ran them all, in `Curve.whole`)."""
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        grouped[record.curve_hash].append(record)
    curves = []
    for runs in grouped.values():
        table: dict[str, dict[int, tuple[float, dict[str, float]]]] = defaultdict(dict)
        for run in runs:
            for budget, point in _points(run).items():
                table[budget][run.seed] = point
        budgets, seeds = _complete_budgets(table)
        if not budgets:
            continue
        curve = _curve(runs, table, budgets, seeds)
        curve.left_out = {b: len(table[b]) for b in sorted(table, key=budget_value) if b not in budgets}
        if curve.left_out and (longest := _complete_budgets(table, longest=True))[0] != budgets:
            curve.whole = _curve(runs, table, *longest)
        curves.append(curve)
    return sorted(curves, key=lambda c: (c.arm != "baseline", c.cyclic, c.arm.count("+"), c.arm, c.curve_hash))


def _curve(runs: Sequence[RunRecord], table: dict, budgets: list[str], seeds: list[int]) -> Curve:
    """The curve of `runs` (one curve hash) over `budgets` and `seeds` of their points `table` (budget -> seed ->
    (accuracy, costs))."""
    units = [u for u in COSTS if all(u in table[b][s][1] for b in budgets for s in seeds)]
    first = runs[0]
    return Curve(
        arm=first.arm,
        curve_hash=first.curve_hash,
        baseline_curve_hash=first.baseline_curve_hash,
        family_hash=first.family_hash,
        cyclic=bool(first.cycles),
        budgets=budgets,
        seeds=seeds,
        accuracy=np.array([[table[b][s][0] for b in budgets] for s in seeds], dtype=float),
        costs={u: np.array([[table[b][s][1][u] for b in budgets] for s in seeds], dtype=float) for u in units},
        run_ids=sorted(r.run_id for r in runs),
        machine=same_machine(runs),
    )


def _complete_budgets(table: Mapping[str, Mapping[int, object]], longest: bool = False) -> tuple[list[str], list[int]]:
    """The budgets a curve keeps and the seeds it has at every one of them: of the prefixes of its budgets
    (shortest first, the order a grid finishes them in), the one with the most points, preferring two
    seeds or more (an interval needs them), ties to more seeds. A grid still running its longest budget
    (one seed done so far) so keeps its finished budgets with every seed, instead of shrinking the
    whole curve to the one seed that has them all. With `longest`, the longest prefix any seed has run."""
    ordered = sorted(table, key=budget_value)
    best: tuple[bool | int, int, int] = (False, 0, 0)
    kept: tuple[list[str], list[int]] = ([], [])
    common: set[int] | None = None
    for k, budget in enumerate(ordered, 1):
        common = set(table[budget]) if common is None else common & set(table[budget])
        score = (k, 0, 0) if longest else (len(common) >= 2, len(common) * k, len(common))
        if common and score > best:
            best, kept = score, (ordered[:k], sorted(common))
    return kept


# Reading the baseline's curve -------------------------------------------------------------
def cost_to_reach(
    costs: Sequence[float] | np.ndarray, accuracies: Sequence[float] | np.ndarray, target: float
) -> tuple[float | None, str]:
    """The cost a curve needs to reach `target`: ``(cost, "")``, or ``(None, "above" | "below")`` beyond its range.

    The curve is made monotone (the best accuracy at or below each cost) and interpolated
    linearly in accuracy against log cost; nothing is extrapolated.
    """
    order = np.argsort(costs, kind="stable")
    cost = np.asarray(costs, dtype=float)[order]
    best = np.maximum.accumulate(np.asarray(accuracies, dtype=float)[order])
    if target > best[-1]:
        return None, "above"
    if target < best[0]:
        return None, "below"
    j = int(np.argmax(best >= target))
    if j == 0 or best[j] == target:
        return float(cost[j]), ""
    share = (target - best[j - 1]) / (best[j] - best[j - 1])
    return float(math.exp(math.log(cost[j - 1]) + share * (math.log(cost[j]) - math.log(cost[j - 1])))), ""


def _log_speedup(
    base_cost: np.ndarray, base_acc: np.ndarray, accuracy: float, cost: float
) -> tuple[float, float, float]:
    """(safe low, safe high) of log(speedup): equal inside the baseline's range; a bound and an open side beyond;
    then the accuracy's margin beyond the range's end (above its best: positive; below its shortest budget's:
    negative; inside: 0), which says whether a bound holds for the mean (`stats.paired_log_interval`)."""
    needed, beyond = cost_to_reach(base_cost, base_acc, accuracy)
    if needed is not None:
        value = math.log(needed / cost)
        return value, value, 0.0
    if beyond == "above":  # the baseline needs more than its longest budget
        return math.log(float(np.max(base_cost)) / cost), math.inf, accuracy - float(np.max(base_acc))
    shortest = float(np.asarray(base_acc)[int(np.argmin(base_cost))])
    return -math.inf, math.log(float(np.min(base_cost)) / cost), accuracy - shortest  # less than its shortest


@dataclass(frozen=True)
class Speedup:
    """Speedup at matched accuracy of one budget of an arm, in one cost unit."""

    arm: str
    budget: str
    unit: str
    n: int
    value: float | None  # None: beyond the baseline's range (or one seed)
    beyond: str = ""  # "above" (more accurate than the baseline's best) or "below" (less than its shortest budget)
    low: float | None = None  # may be 0 or inf: a side the baseline's range leaves open
    high: float | None = None
    p_up: float | None = None  # one-sided t-test p-value that the speedup is above 1
    p_down: float | None = None  # ... below 1
    q: float | None = None  # the two-sided p adjusted over the section's cells (Benjamini-Hochberg); None: alone
    left_out: str = ""  # why the point is not judged (at the section's floor), else ""
    seed_logs: tuple[tuple[float, float], ...] = ()  # each seed's safe (low, high) log speedup
    seed_margins: tuple[float, ...] | None = None  # each seed's accuracy beyond the baseline's range (`_log_speedup`)

    @property
    def p(self) -> float | None:
        """Two-sided p-value against no speed-up."""
        if self.p_up is None or self.p_down is None:
            return None
        return min(1.0, 2 * min(self.p_up, self.p_down))

    @property
    def verdict(self) -> str:
        if self.left_out or self.low is None or self.high is None:
            return "unknown"
        if self.q is None:  # read alone: the interval decides
            return "better" if self.low > 1 else "worse" if self.high < 1 else "within noise"
        if self.q >= SIGNIFICANCE:
            return "within noise"
        return "better" if (self.p_up or 0.0) <= (self.p_down or 0.0) else "worse"

    def format(self) -> str:
        if self.left_out:
            return f"left out ({self.left_out})"
        if self.n < 2 or self.low is None or self.high is None:
            return f"— ({self.n} seed{'s' if self.n != 1 else ''}: no interval)"
        ends = f"[{_number(self.low)}, {_number(self.high)}] n={self.n}"
        if self.q is not None:
            ends += f", q={self.q:.2g}"
        if self.value is None:
            side = "above its best" if self.beyond == "above" else "below its shortest budget"
            return f"beyond the baseline's range ({side}) {ends}"
        return f"{self.value:.2f}x {ends}"


def _number(value: float) -> str:
    return "beyond range" if value in (0.0, math.inf) else f"{value:.2f}"


def paired_by_seed(arm: Curve, base: Curve, unit: str) -> tuple[np.ndarray, ...] | None:
    """(arm accuracy, arm cost, baseline accuracy, baseline cost) over the seeds both curves have (rows in the
    same seed order), or None when they share no seed, one lacks the cost `unit`, or `unit` is a time and the
    two did not run on one machine (`other_machine`)."""
    seeds = sorted(set(arm.seeds) & set(base.seeds))
    if unit not in arm.costs or unit not in base.costs or not seeds or (unit in TIMED and other_machine(arm, base)):
        return None
    pick_a, pick_b = [arm.seeds.index(s) for s in seeds], [base.seeds.index(s) for s in seeds]
    return arm.accuracy[pick_a], arm.costs[unit][pick_a], base.accuracy[pick_b], base.costs[unit][pick_b]


def other_machine(arm: Curve, base: Curve) -> str:
    """Why `arm`'s times are not compared with `base`'s: they ran on different machines (or either on several);
    "" when both ran on one."""
    if arm.machine is not None and arm.machine == base.machine:
        return ""
    return (
        f"ran on {arm.machine or 'several machines'}, the baseline on {base.machine or 'several machines'}: "
        "times of different machines"
    )


def floor_of(base: Curve) -> float | None:
    """The accuracy every seed of the baseline reports exactly at some budget (a constant prediction: chance,
    or a plateau), the highest such; None where there is none (or one seed)."""
    if base.n < 2:
        return None
    flat = [
        float(base.accuracy[0, j])
        for j in range(len(base.budgets))
        if np.all(base.accuracy[:, j] == base.accuracy[0, j])
    ]
    return max(flat) if flat else None


def matched_speedups(
    arm: Curve, base: Curve, unit: str, confidence: float = 0.95, floor: float | None = None
) -> list[Speedup]:
    """For each budget of `arm`: the baseline's cost to reach its accuracy / its cost, with a paired t-interval
    over seeds. A point whose mean accuracy is at or below `floor` (`floor_of` the baseline) is left out."""
    elsewhere = other_machine(arm, base) if unit in TIMED else ""
    if elsewhere:
        return [Speedup(arm.arm, budget, unit, arm.n, None, left_out=elsewhere) for budget in arm.budgets]
    paired = paired_by_seed(arm, base, unit)
    if paired is None:
        return []
    a_acc, a_cost, b_acc, b_cost = paired
    n = len(a_acc)
    speedups = []
    for j, budget in enumerate(arm.budgets):
        accuracy = float(a_acc[:, j].mean())
        if floor is not None and accuracy <= floor + 1e-12:
            reason = f"at the baseline's floor {floor:.2%}, a constant prediction"
            speedups.append(Speedup(arm.arm, budget, unit, n, None, left_out=reason))
            continue
        needed, beyond = cost_to_reach(b_cost.mean(0), b_acc.mean(0), accuracy)
        value = needed / float(a_cost[:, j].mean()) if needed is not None else None
        if n < 2:
            speedups.append(Speedup(arm.arm, budget, unit, n, None, beyond))
            continue
        read = [_log_speedup(b_cost[i], b_acc[i], float(a_acc[i, j]), float(a_cost[i, j])) for i in range(n)]
        logs, margins = tuple((low, high) for low, high, _ in read), tuple(margin for _, _, margin in read)
        low, high, p_up, p_down = paired_log_interval(logs, confidence, margins)
        ends = (low, high, p_up, p_down)
        speedups.append(Speedup(arm.arm, budget, unit, n, value, beyond, *ends, seed_logs=logs, seed_margins=margins))
    return speedups


def verdict(speedups: Sequence[Speedup]) -> str:
    """dominates / dominated / crosses / within noise, with the budgets behind it."""
    judged = [s for s in speedups if s.verdict != "unknown"]
    if not judged:
        reasons = {s.left_out for s in speedups}
        return f"left out ({reasons.pop()})" if len(reasons) == 1 and "" not in reasons else "— (needs 2 seeds)"
    better = [s.budget for s in judged if s.verdict == "better"]
    worse = [s.budget for s in judged if s.verdict == "worse"]
    total = len(judged)
    if better and worse:
        return f"crosses (better at {', '.join(better)}; worse at {', '.join(worse)})"
    if len(better) == total:
        return f"dominates (better at all {total} budgets)"
    if len(worse) == total:
        return f"dominated (worse at all {total} budgets)"
    if better:
        return f"better at {', '.join(better)}; within noise at the other {total - len(better)}"
    if worse:
        return f"worse at {', '.join(worse)}; within noise at the other {total - len(worse)}"
    return f"within noise (all {total} budgets)"


# The Pareto front --------------------------------------------------------------------------
def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both cost (lower) and accuracy (higher), by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def pareto_points(curves: Sequence[Curve], unit: str) -> list[tuple[str, str, float, float]]:
    """(arm, budget, mean cost, mean accuracy) of every point on the front over all arms' curves. An arm's
    cyclic curve stays off the front where the arm also has a sweep: it is then a check of the sweep (a
    cheaper estimate of the same curve), not another way to train."""
    swept = {(curve.arm, curve.family_hash) for curve in curves if not curve.cyclic}
    points = [
        (curve.label, budget, float(curve.costs[unit][:, j].mean()), float(curve.accuracy[:, j].mean()))
        for curve in curves
        if unit in curve.costs and not (curve.cyclic and (curve.arm, curve.family_hash) in swept)
        for j, budget in enumerate(curve.budgets)
    ]
    return [points[i] for i in pareto_front([(p[2], p[3]) for p in points])]
