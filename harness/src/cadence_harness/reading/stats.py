"""Confidence intervals over seeds.

* Means (accuracy, time, throughput): Student-t intervals, ``mean ± t(0.975, n-1) · s / √n``.
  They assume roughly normal seed-to-seed variation, which is the usual model for final
  accuracy and wall-clock, and they stay honest (wide) with 3 seeds.
* Costs (times, FLOPs, throughput, memory: positive, with multiplicative noise): the mean with a
  t-interval taken on the log scale, ``mean · exp(±t(0.975, n-1) · s_log / √n)`` where ``s_log`` is
  the standard deviation of the logs. A busy machine's slow run widens it upward, and it never reaches
  zero (a plain t-interval of 0.8 s over two seeds of 0.2 s and 1.4 s would read "0.8 ± 7.6").
* Differences against the baseline (accuracy delta): a paired t-interval on the per-seed
  differences, because the arm and the baseline share the seed, hence data order and init.
* Speedups (a ratio of mean times): a paired bootstrap. Seeds are resampled with
  replacement, keeping each arm/baseline pair together, and the 2.5th and 97.5th
  percentiles of ``mean(baseline) / mean(arm)`` bound it. A ratio's distribution is skewed,
  which the bootstrap follows and a t-interval would not. With n seeds there are only
  C(2n-1, n) distinct resamples (10 for n = 3), so with few seeds the interval is coarse
  and tends to be narrow: read it together with n.

Every resample uses a fixed generator, so a report is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "log_t_interval", "paired_bootstrap_ratio", "paired_t_difference", "t_interval"]


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


def paired_bootstrap_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """``mean(numerator) / mean(denominator)`` with a paired percentile-bootstrap interval."""
    top, bottom = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if len(top) != len(bottom):
        raise ValueError(f"paired samples need equal lengths, got {len(top)} and {len(bottom)}")
    n = len(top)
    if n == 0:
        return Interval(float("nan"), None, None, 0)
    ratio = float(top.mean() / bottom.mean())
    if n < 2:
        return Interval(ratio, None, None, n)
    index = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    ratios = top[index].mean(axis=1) / bottom[index].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return Interval(ratio, float(low), float(high), n)
