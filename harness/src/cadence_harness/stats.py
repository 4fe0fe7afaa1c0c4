"""Confidence intervals over seeds, and the corrections for testing many comparisons at once.

One interval family for everything: a Student-t interval, on the scale where seed-to-seed noise is
roughly normal and additive, with n always shown beside it.

* Means (accuracy): ``mean ± t(0.975, n-1) · s / √n``. They stay honest (wide) with 3 seeds.
* Costs (times, FLOPs, throughput, memory: positive, with multiplicative noise): the mean with a
  t-interval taken on the log scale, ``mean · exp(±t(0.975, n-1) · s_log / √n)`` where ``s_log`` is
  the standard deviation of the logs. A busy machine's slow run widens it upward, and it never reaches
  zero (a plain t-interval of 0.8 s over two seeds of 0.2 s and 1.4 s would read "0.8 ± 7.6").
* Differences against the baseline (accuracy delta): a paired t-interval on the per-seed
  differences, because the arm and the baseline share the seed, hence data order and init.
* Ratios against the baseline (time and FLOPs ratios, speedups): a paired t-interval on the per-seed
  log-ratios, ``exp(mean ± t · s / √n)`` of ``log(baseline_i / arm_i)``; its point is the geometric mean
  of the per-seed ratios. The percentile bootstrap this replaced is the range of the seeds' values
  with 3 seeds: simulated with paired normal seeds, its nominal 95% covered about 75%; the t-interval
  covers 95% (``harness/tests/test_stats_coverage.py`` checks it at n = 3 and n = 5).

Many comparisons are read at once (a study's claims, a table's better/worse cells), so a few look
significant by chance: `holm` adjusts the p-values of a family for its family-wise error rate, and
`benjamini_hochberg` for its false-discovery rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Interval",
    "benjamini_hochberg",
    "holm",
    "log_t_interval",
    "paired_log_interval",
    "paired_t_difference",
    "paired_t_p_value",
    "paired_t_ratio",
    "t_bounds",
    "t_interval",
    "t_p_values",
]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence bounds (None when n is too small for one)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    def format(self, scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
        if math.isnan(self.mean):
            return "n/a"
        text = f"{self.mean * scale:.{digits}f}{suffix}"
        if self.low is None or self.high is None:
            return text
        half = (self.high - self.low) / 2
        if math.isclose(self.mean - self.low, half, rel_tol=1e-6, abs_tol=1e-12):
            return f"{text} ± {half * scale:.{digits}f}"
        return f"{text} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"


def _t_quantile(confidence: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, dof))


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean and Student-t confidence interval of independent values."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Interval(float("nan"), None, None, 0)
    mean = float(data.mean())
    if n < 2:
        return Interval(mean, None, None, n)
    half = _t_quantile(confidence, n - 1) * float(data.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def log_t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of positive values (a cost) with a Student-t interval on the log scale: ``mean · exp(±t·s_log/√n)``.

    Values that are not all positive get the plain `t_interval`.
    """
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n < 2 or not np.all(data > 0):
        return t_interval(values, confidence)
    mean = float(data.mean())
    factor = math.exp(_t_quantile(confidence, n - 1) * float(np.log(data).std(ddof=1)) / math.sqrt(n))
    return Interval(mean, mean / factor, mean * factor, n)


def paired_t_difference(arm: Sequence[float], baseline: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of ``arm[i] - baseline[i]`` over paired seeds, with a t-interval."""
    if len(arm) != len(baseline):
        raise ValueError(f"paired samples need equal lengths, got {len(arm)} and {len(baseline)}")
    return t_interval(np.asarray(arm, dtype=float) - np.asarray(baseline, dtype=float), confidence)


def paired_t_p_value(arm: Sequence[float], baseline: Sequence[float]) -> float | None:
    """Two-sided paired t-test p-value that ``arm - baseline`` has mean 0 (None below two pairs). Pairs that all
    differ by the same amount give 0 (no noise: any difference is real) or 1 (no difference)."""
    from scipy.stats import t

    diffs = np.asarray(arm, dtype=float) - np.asarray(baseline, dtype=float)
    if len(diffs) < 2:
        return None
    mean, spread = float(diffs.mean()), float(diffs.std(ddof=1))
    if spread == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * t.sf(abs(mean) / (spread / math.sqrt(len(diffs))), len(diffs) - 1))


def paired_t_ratio(numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95) -> Interval:
    """The geometric mean of ``numerator[i] / denominator[i]`` over paired seeds, with a t-interval on the logs."""
    top, bottom = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if len(top) != len(bottom):
        raise ValueError(f"paired samples need equal lengths, got {len(top)} and {len(bottom)}")
    if len(top) == 0:
        return Interval(float("nan"), None, None, 0)
    if not (np.all(top > 0) and np.all(bottom > 0)):
        raise ValueError("`paired_t_ratio` needs positive values (costs); got a zero or negative one")
    logs = t_interval(np.log(top / bottom), confidence)
    if logs.low is None or logs.high is None:
        return Interval(math.exp(logs.mean), None, None, logs.n)
    return Interval(math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.n)


def t_bounds(lows: Sequence[float], highs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The t-interval of per-seed values known only as bounds ``lows[i] <= x_i <= highs[i]`` (equal where a value is
    known): its low end from the lows, its high end from the highs, each safe. A side with an unbounded seed
    (``-inf`` low, ``+inf`` high) stays unbounded. Needs two seeds."""
    if len(lows) != len(highs) or len(lows) < 2:
        raise ValueError(f"`t_bounds` needs as many lows as highs, two or more; got {len(lows)} and {len(highs)}")
    low_side, high_side = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    low = t_interval(low_side, confidence).low if np.all(np.isfinite(low_side)) else -math.inf
    high = t_interval(high_side, confidence).high if np.all(np.isfinite(high_side)) else math.inf
    return float(low), float(high)  # type: ignore[arg-type]


def t_p_values(lows: Sequence[float], highs: Sequence[float], null: float = 0.0) -> tuple[float, float]:
    """One-sided t-test p-values that the mean of per-seed values (given as safe bounds, as in `t_bounds`) lies
    above `null` (from the lows) and below it (from the highs); 1 where a side has an unbounded seed. Seeds that
    agree exactly give 0 or 1 (no noise: the sign decides)."""
    from scipy.stats import t

    def above(values: np.ndarray) -> float:
        if not np.all(np.isfinite(values)):
            return 1.0
        n, mean, spread = len(values), float(values.mean()), float(values.std(ddof=1))
        if spread == 0 or not math.isfinite(spread):
            return 0.0 if mean > null else 1.0
        return float(t.sf((mean - null) / (spread / math.sqrt(n)), n - 1))

    low_side, high_side = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    return above(low_side), above(2 * null - high_side)


def paired_log_interval(
    log_bounds: Sequence[tuple[float, float]], confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """The paired t-interval of a speedup from each seed's safe (low, high) log speedup (equal where the seed's
    speedup is known): ``(low, high, p_up, p_down)``, the ends as ratios (0 or inf where a side stays
    unbounded) and the one-sided p-values that it lies above 1 and below 1."""
    lows, highs = [b[0] for b in log_bounds], [b[1] for b in log_bounds]
    low, high = t_bounds(lows, highs, confidence)
    p_up, p_down = t_p_values(lows, highs)
    return math.exp(low), math.exp(high), p_up, p_down


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: an adjusted p-value below 0.05 keeps the family-wise error rate at 5%."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg q-values: a q below 0.05 keeps the expected share of false discoveries at 5%."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i], reverse=True)
    adjusted, running = [1.0] * m, 1.0
    for rank, i in enumerate(order):
        running = min(running, p_values[i] * m / (m - rank))
        adjusted[i] = running
    return adjusted
