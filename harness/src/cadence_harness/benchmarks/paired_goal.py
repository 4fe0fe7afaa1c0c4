"""A benchmark goal judged by the interval of paired repeats, not by one median against a line.

A benchmark that runs two variants side by side, interleaved, repeat after repeat, pairs them by repeat: a
repeat on which the shared machine was slow moves both. The mean of the paired differences and its 95%
t-interval say whether a goal such as "adds <= 200 us per step" is met (the whole interval within it), missed
(all of it beyond), or not decided at this machine's noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["goal_verdict", "paired_difference"]


def paired_difference(
    variant: Sequence[float], baseline: Sequence[float]
) -> tuple[float, float | None, float | None, int]:
    """``(mean, low, high, n)`` of ``variant[i] - baseline[i]``: the mean and its 95% t-interval (None below two
    pairs)."""
    if len(variant) != len(baseline) or not variant:
        raise ValueError(f"need equally many repeats of both, one or more; got {len(variant)} and {len(baseline)}")
    differences = [a - b for a, b in zip(variant, baseline)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean, None, None, 1
    from scipy.stats import t

    half = t.ppf(0.975, len(differences) - 1) * statistics.stdev(differences) / len(differences) ** 0.5
    return mean, mean - half, mean + half, len(differences)


def goal_verdict(low: float | None, high: float | None, mean: float, goal: float) -> str:
    """PASS when the whole interval is within `goal`, FAIL when all of it is beyond, else INCONCLUSIVE."""
    if low is None or high is None:
        return f"{'PASS' if mean <= goal else 'FAIL'} (one repeat: no interval; use --repeats 5 or more)"
    if high <= goal:
        return "PASS"
    return "FAIL" if low > goal else "INCONCLUSIVE at this machine's noise (more --repeats, or a quieter machine)"
