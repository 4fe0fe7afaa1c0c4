"""A curve's speedup at the baseline's best accuracy: how much less it needs to reach the **baseline's best mean
accuracy** than the baseline's curve does (cost to reach it read off each mean curve made monotone and
interpolated against log cost, as `cadence_harness.reading.tradeoff` does), with a paired t-interval over seeds on
the log speedups of each seed pair (seed i's arm curve against seed i's baseline curve at that seed's best
accuracy; `cadence_harness.stats`). The recipe search (`cadence_harness.reading.combination_search`) ranks and
judges by it: a recipe *qualifies* at >= 1.5x with the interval above 1.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from cadence_harness.reading.tradeoff import Curve, cost_to_reach, paired_by_seed
from cadence_harness.stats import paired_log_interval

__all__ = ["QUALIFYING_SPEEDUP", "TargetSpeedup", "gain_over", "speedup_at_baseline_best"]

QUALIFYING_SPEEDUP = 1.5


@dataclass(frozen=True)
class TargetSpeedup:
    """The baseline's cost to reach its own best accuracy / an arm's cost to reach the same accuracy."""

    arm: str
    unit: str
    n: int
    target: float  # the baseline's best mean accuracy
    value: float | None  # None: only a bound is known (`at_least`, or `bound` for a curve that never reaches it)
    low: float | None = None
    high: float | None = None
    at_least: float | None = None  # the mean curve is above the target already at its shortest budget
    cyclic: bool = False  # read off cyclic curves (a screen), not sweeps
    # the mean curve never reaches the target: the baseline's cost to reach it over the arm's longest run's cost,
    # an upper bound on the speedup and the factor a cost-matched run stretches the longest budget by
    bound: float | None = None

    @property
    def estimate(self) -> float | None:
        """The value, else the lower bound of a curve above the target from its shortest budget on."""
        return self.value if self.value is not None else self.at_least

    def qualifies(self, ratio: float = QUALIFYING_SPEEDUP) -> bool:
        estimate = self.estimate
        return estimate is not None and estimate >= ratio and self.low is not None and self.low > 1

    def needs_more_seeds(self, ratio: float = QUALIFYING_SPEEDUP) -> bool:
        """Whether the estimate qualifies but the interval, on too few seeds, does not exclude 1."""
        return self.estimate is not None and self.estimate >= ratio and not self.qualifies(ratio)

    def verdict(self) -> str:
        """Whether it qualifies; where the data cannot tell, that it is undecided and why, never a "no"."""
        if self.qualifies():
            return "it qualifies"
        if self.estimate is None:
            return "undecided: its curve does not reach the baseline's best accuracy, so only a bound is known"
        if self.needs_more_seeds():
            return f"undecided: {self.estimate:.2f}x, but with n={self.n} its interval does not exclude 1"
        if self.high is None or self.high >= QUALIFYING_SPEEDUP:  # below 1.5x, but not shown to be (or no interval)
            return (
                f"undecided: {self.estimate:.2f}x, below {QUALIFYING_SPEEDUP}x, but with n={self.n} its interval does "
                f"not exclude {QUALIFYING_SPEEDUP}x"
            )
        return "it does not qualify"

    def format(self) -> str:
        return self._format() + (", cyclic screen" if self.cyclic else "")

    def _format(self) -> str:
        if self.value is None and self.at_least is not None:
            interval = f" [{self.low:.2f}, unbounded]" if self.low is not None else f" ({self.n} seed: no interval)"
            interval = interval.replace("]", f"] n={self.n}") if self.low is not None else interval
            return f">= {self.at_least:.2f}x (above {self.target:.1%} already at its shortest budget){interval}"
        if self.value is None:
            return f"does not reach {self.target:.1%}" + (f" (< {self.bound:.2f}x)" if self.bound else "")
        if self.low is None or self.high is None:
            return f"{self.value:.2f}x ({self.n} seed: no interval)"
        low = "unbounded" if self.low == 0 else f"{self.low:.2f}"  # a resample never reached the target
        high = "unbounded" if math.isinf(self.high) else f"{self.high:.2f}"
        return f"{self.value:.2f}x [{low}, {high}] n={self.n}"


def _ratio(
    base_cost: np.ndarray, base_acc: np.ndarray, cost: np.ndarray, acc: np.ndarray
) -> tuple[float, float, float]:
    """(safe low, safe high) of log(speedup) at the baseline's best accuracy of these curves, and where the arm's
    curve misses it, its margin (its shortest budget's accuracy over the target, or its best's under it)."""
    target = float(np.max(base_acc))
    needed, _ = cost_to_reach(base_cost, base_acc, target)
    assert needed is not None  # the baseline always reaches its own best
    spent, beyond = cost_to_reach(cost, acc, target)
    if spent is not None:
        value = math.log(needed / spent)
        return value, value, 0.0
    if beyond == "above":  # the arm needs more than its longest budget
        return -math.inf, math.log(needed / float(np.max(cost))), float(np.max(acc)) - target
    shortest = float(np.asarray(acc)[int(np.argmin(cost))])
    return math.log(needed / float(np.min(cost))), math.inf, shortest - target  # less than its shortest


def _on_seeds(curve: Curve, seeds: set[int]) -> Curve:
    keep = [i for i, s in enumerate(curve.seeds) if s in seeds]
    costs = {unit: values[keep] for unit, values in curve.costs.items()}
    return dataclasses.replace(curve, seeds=[curve.seeds[i] for i in keep], accuracy=curve.accuracy[keep], costs=costs)


def _without_seed(curve: Curve, seed: int) -> Curve:
    return _on_seeds(curve, set(curve.seeds) - {seed})


def _log_speedups(
    arm: Curve, base: Curve, unit: str
) -> tuple[float, tuple[float, float], list[tuple[float, float]], list[float]] | None:
    """(the baseline's best mean accuracy, the safe bounds of the mean curves' log speedup at it, each seed pair's
    at its baseline seed's best, and each seed's margin), over the seeds both curves have; None where
    `paired_by_seed` pairs none."""
    paired = paired_by_seed(arm, base, unit)
    if paired is None:
        return None
    a_acc, a_cost, b_acc, b_cost = paired
    mean = _ratio(b_cost.mean(0), b_acc.mean(0), a_cost.mean(0), a_acc.mean(0))[:2]
    seeds = [_ratio(b_cost[i], b_acc[i], a_cost[i], a_acc[i]) for i in range(len(a_acc))]
    return float(b_acc.mean(0).max()), mean, [seed[:2] for seed in seeds], [seed[2] for seed in seeds]


def speedup_at_baseline_best(
    arm: Curve, base: Curve, unit: str, confidence: float = 0.95, skip_seed: int | None = None
) -> TargetSpeedup | None:
    """`arm`'s speedup at the baseline's best mean accuracy in `unit`, with a paired t-interval over seeds (each
    seed pair read at its baseline seed's best accuracy); `skip_seed` leaves one seed out of the arm's runs (the
    one that screened it: reused, it would favour the candidate that led by luck)."""
    if skip_seed is not None:
        arm = _without_seed(arm, skip_seed)
    speedups = _log_speedups(arm, base, unit)
    if speedups is None:
        return None
    target, (low, high), bounds, margins = speedups
    value = math.exp(low) if low == high else None
    at_least = math.exp(low) if value is None and math.isinf(high) else None
    bound = math.exp(high) if value is None and at_least is None else None
    if len(bounds) < 2:
        return TargetSpeedup(arm.arm, unit, 1, target, value, None, None, at_least, arm.cyclic, bound)
    low_end, high_end, _, _ = paired_log_interval(bounds, confidence, margins)
    return TargetSpeedup(arm.arm, unit, len(bounds), target, value, low_end, high_end, at_least, arm.cyclic, bound)


def gain_over(
    arm: Curve, recipe: Curve, base: Curve, unit: str, confidence: float = 0.95, skip_seed: int | None = None
) -> TargetSpeedup | None:
    """How much faster `arm` (a recipe plus one method) reaches the baseline's best accuracy than `recipe` does:
    the ratio of their speedups (`speedup_at_baseline_best`), with a paired t-interval over the seeds all three
    curves share (each seed read at its baseline seed's best accuracy), less `skip_seed`. A greedy search joins a
    method by its point estimate; this interval says whether the join's gain is measurable or within the noise.
    None where fewer than two seeds are shared, or either mean curve gives only a bound."""
    seeds = set(arm.seeds) & set(recipe.seeds) & set(base.seeds) - {skip_seed}
    if len(seeds) < 2:
        return None
    arm, recipe, base = (_on_seeds(curve, seeds) for curve in (arm, recipe, base))
    with_arm, with_recipe = _log_speedups(arm, base, unit), _log_speedups(recipe, base, unit)
    if with_arm is None or with_recipe is None:
        return None
    (target, (a_low, a_high), arm_bounds, _), (_, (r_low, r_high), recipe_bounds, _) = with_arm, with_recipe
    if a_low != a_high or r_low != r_high:
        return None
    # log(arm's speedup) - log(recipe's) on each seed (both in seed order), each end at its safe side
    bounds = [(a[0] - r[1], a[1] - r[0]) for a, r in zip(arm_bounds, recipe_bounds)]
    low, high, _, _ = paired_log_interval(bounds, confidence)
    return TargetSpeedup(arm.arm, unit, len(seeds), target, math.exp(a_low - r_low), low, high)
