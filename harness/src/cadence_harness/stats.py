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
* Seeds known only as bounds (a speedup beyond the baseline's range: the arm is more accurate than the
  baseline's longest budget, or less than its shortest): the side of the interval and the one-sided p-value
  that rest on them are the more cautious of the t-interval's and the sign test's, because equal bounds
  (deterministic FLOPs) have no spread and a t-interval on them alone read p = 0. With 5 seeds or fewer the
  sign test bounds nothing at 95 %, so that side stays open.

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


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Interval:
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


def log_t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Interval:
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


def t_bounds(
    lows: Sequence[float], highs: Sequence[float], confidence: float = 0.95, margins: Sequence[float] | None = None
) -> tuple[float, float]:
    """The t-interval of per-seed values known only as bounds ``lows[i] <= x_i <= highs[i]`` (equal where a value is
    known): its low end from the lows, its high end from the highs. A side with an unbounded seed (``-inf`` low,
    ``+inf`` high) stays unbounded. A side that rests on bounds is read as `_beyond` says. Needs two seeds."""
    if len(lows) != len(highs) or len(lows) < 2:
        raise ValueError(f"`t_bounds` needs as many lows as highs, two or more; got {len(lows)} and {len(highs)}")
    low_side, high_side = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    alpha = (1 - confidence) / 2
    side, p_margin = _beyond(low_side, high_side, margins)
    if side == "above":  # every seed beyond the top: the bounds' own t end, once the margins show it
        return (float(t_interval(low_side, confidence).low) if p_margin <= alpha else -math.inf), math.inf  # type: ignore[arg-type]
    if side == "below":
        return -math.inf, (float(t_interval(high_side, confidence).high) if p_margin <= alpha else math.inf)  # type: ignore[arg-type]
    low = t_interval(low_side, confidence).low if np.all(np.isfinite(low_side)) else -math.inf
    high = t_interval(high_side, confidence).high if np.all(np.isfinite(high_side)) else math.inf
    if np.any(low_side != high_side):  # bounds understate the spread: no surer than the sign test
        low = min(low, _order_bound(low_side, confidence))  # type: ignore[type-var]
        high = max(high, -_order_bound(-high_side, confidence))  # type: ignore[type-var]
    return float(low), float(high)  # type: ignore[arg-type]


def t_p_values(
    lows: Sequence[float], highs: Sequence[float], null: float = 0.0, margins: Sequence[float] | None = None
) -> tuple[float, float]:
    """One-sided p-values that the mean of per-seed values (given as bounds, as in `t_bounds`) lies above `null`
    (from the lows) and below it (from the highs); 1 where a side has an unbounded seed. Known values that agree
    exactly give 0 or 1 (no noise: the sign decides). A side that rests on bounds is read as `_beyond` says: the
    larger of two p-values is valid where either is (an intersection-union test where both must hold)."""
    low_side, high_side = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    side, p_margin = _beyond(low_side, high_side, margins)
    if side == "above":
        return max(p_margin, _p_above(low_side, null)), 1.0
    if side == "below":
        return 1.0, max(p_margin, _p_above(2 * null - high_side, null))
    bounded = bool(np.any(low_side != high_side))
    return _p_above(low_side, null, sign=bounded), _p_above(2 * null - high_side, null, sign=bounded)


def _beyond(lows: np.ndarray, highs: np.ndarray, margins: Sequence[float] | None) -> tuple[str, float]:
    """How a side resting on bounds is read: ``("above" | "below", p)`` where every seed lies beyond the same end
    of the baseline's range and `margins` are given, else ``("", 1.0)``.

    Every seed beyond the top (the arm more accurate than the baseline's best, each ``margins[i]`` its accuracy
    over that best) bounds the speedup below by the ratio of costs: if the arm's mean accuracy is above the
    baseline's best mean, the baseline needs at least its top cost for it. So that side is the cost ratios' own
    t end, valid once a paired t-test on the margins (known values, p returned) shows the mean margin above 0;
    until then it stays open. Beyond the bottom, mirrored. Elsewhere, where only some seeds are bounds, the side
    takes the more cautious of the t end and the sign test's (`_order_bound`, `_p_above`): bounds understate the
    seeds' spread (five equal bounds of deterministic FLOPs have none), so a t end from them alone claims more
    than they show; with 5 seeds or fewer the sign test bounds nothing at 95 %, and that side stays open."""
    if margins is None or len(margins) != len(lows):
        return "", 1.0
    values = np.asarray(margins, dtype=float)
    if np.all(np.isinf(highs) & np.isfinite(lows)):
        return "above", _p_above(values, 0.0)
    if np.all(np.isinf(lows) & np.isfinite(highs)):
        return "below", _p_above(-values, 0.0)
    return "", 1.0


def _p_above(values: np.ndarray, null: float, sign: bool = False) -> float:
    """One-sided t-test p-value that the values' mean is above `null` (1 with an unbounded value; 0 or 1 where
    they agree exactly); with `sign`, no smaller than the sign test's (the binomial chance of so many above)."""
    from scipy.stats import binom, t

    if not np.all(np.isfinite(values)):
        return 1.0
    n, mean, spread = len(values), float(values.mean()), float(values.std(ddof=1))
    if spread == 0 or not math.isfinite(spread):
        p = 0.0 if mean > null else 1.0
    else:
        p = float(t.sf((mean - null) / (spread / math.sqrt(n)), n - 1))
    return max(p, float(binom.sf(int(np.sum(values > null)) - 1, n, 0.5))) if sign else p


def _order_bound(values: np.ndarray, confidence: float) -> float:
    """The sign test's lower confidence bound for the median of the values (or of anything above them): their r-th
    smallest, r the largest with ``P(Binomial(n, 1/2) < r) <= (1 - confidence) / 2``; ``-inf`` where no r is
    (n <= 5 at 95 %: even n seeds all above a point leave a chance of 1/2**n that the median is below it)."""
    from scipy.stats import binom

    n, alpha = len(values), (1 - confidence) / 2
    r = max((k for k in range(1, n + 1) if binom.cdf(k - 1, n, 0.5) <= alpha), default=0)
    return float(np.sort(values)[r - 1]) if r else -math.inf


def paired_log_interval(
    log_bounds: Sequence[tuple[float, float]], confidence: float = 0.95, margins: Sequence[float] | None = None
) -> tuple[float, float, float, float]:
    """The paired t-interval of a speedup from each seed's safe (low, high) log speedup (equal where the seed's
    speedup is known): ``(low, high, p_up, p_down)``, the ends as ratios (0 or inf where a side stays
    unbounded) and the one-sided p-values that it lies above 1 and below 1. `margins`: each seed's accuracy
    beyond the end of the baseline's range its bound is read at (see `_beyond`)."""
    lows, highs = [b[0] for b in log_bounds], [b[1] for b in log_bounds]
    low, high = t_bounds(lows, highs, confidence, margins)
    p_up, p_down = t_p_values(lows, highs, margins=margins)
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
