"""A benchmark goal judged by the interval of paired repeats, not by one median against a line.

A benchmark that runs two variants side by side, interleaved, repeat after repeat, pairs them by repeat: a
repeat on which the shared machine was slow moves both. The mean of the paired differences and its 95%
t-interval say whether a goal such as "adds <= 200 us per step" is met (the whole interval within it), missed
(all of it beyond), or not decided at this machine's noise.
"""

from __future__ import annotations

from collections.abc import Sequence

from cadence_harness.stats import Interval, paired_t_difference

__all__ = ["goal_text", "goal_verdict", "interval_text", "paired_difference"]


def paired_difference(variant: Sequence[float], baseline: Sequence[float]) -> Interval:
    """The mean of ``variant[i] - baseline[i]`` with its 95% t-interval (no bounds below two pairs): the same
    paired interval the reports use (`cadence_harness.stats`)."""
    if len(variant) != len(baseline) or not variant:
        raise ValueError(f"need equally many repeats of both, one or more; got {len(variant)} and {len(baseline)}")
    return paired_t_difference(variant, baseline)


def goal_verdict(extra: Interval, goal: float) -> str:
    """PASS when the whole interval is within `goal`, FAIL when all of it is beyond, else INCONCLUSIVE."""
    if extra.low is None or extra.high is None:
        return f"{'PASS' if extra.mean <= goal else 'FAIL'} (one repeat: no interval; use --repeats 5 or more)"
    if extra.high <= goal:
        return "PASS"
    return "FAIL" if extra.low > goal else "INCONCLUSIVE at this machine's noise (more --repeats, or a quieter machine)"


def interval_text(extra: Interval, unit: str) -> str:
    """``mean [low, high] (95%, n paired repeats) unit`` (the bounds left out for one repeat)."""
    bounds = extra.low is not None and extra.high is not None
    interval = f" [{extra.low:.1f}, {extra.high:.1f}] (95%, n={extra.n} paired repeats)" if bounds else ""
    return f"{extra.mean:.1f}{interval} {unit}"


def goal_text(extra: Interval, goal: float, unit: str) -> str:
    """The line a benchmark prints: ``mean [low, high] (95%, n paired repeats) unit; goal <= goal: verdict``."""
    return f"{interval_text(extra, unit)}; goal <= {goal:.0f} {unit.split()[0]}: {goal_verdict(extra, goal)}"
