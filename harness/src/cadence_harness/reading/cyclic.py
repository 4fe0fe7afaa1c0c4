"""The baseline's cyclic curve against its sweep: how far one run's evaluations at each cycle's end stand from
separate runs that each decay fully at that budget, budget by budget, paired by seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cadence_harness.reading.tradeoff import Curve
from cadence_harness.stats import Interval, paired_t_difference, t_interval

__all__ = ["CyclicCheck", "cyclic_checks"]


@dataclass
class CyclicCheck:
    """How far the baseline's cyclic curve is from its sweep, budget by budget (paired by seed)."""

    budgets: list[str]
    differences: list[Interval]  # cyclic - sweep accuracy
    sweep_spread: list[Interval]  # the sweep's own accuracy, for scale

    def format(self) -> str:
        if not self.budgets:
            return "no budget has both a cyclic and a sweep run of the same seed"
        parts = [f"{b}: {d.format(scale=100)} pp" for b, d in zip(self.budgets, self.differences)]
        sizes = [abs(d.mean) * 100 for d in self.differences]
        worst = int(np.argmax(sizes))
        within = sum(1 for d in self.differences if d.low is not None and d.high is not None and d.low <= 0 <= d.high)
        return (
            f"cyclic - sweep accuracy on the baseline (n={self.differences[0].n}): {'; '.join(parts)}. "
            f"Mean |Δ| {np.mean(sizes):.2f} pp, largest {sizes[worst]:.2f} pp at {self.budgets[worst]}; "
            f"{within} of {len(self.budgets)} intervals contain 0."
        )


def cyclic_checks(curves: Sequence[Curve]) -> dict[str, CyclicCheck]:
    """For each family with a baseline curve both ways: the cyclic curve against the sweep."""
    checks = {}
    for cyclic in (c for c in curves if c.cyclic and c.arm == "baseline"):
        sweep = next(
            (c for c in curves if not c.cyclic and c.arm == "baseline" and c.family_hash == cyclic.family_hash), None
        )
        if sweep is None:
            continue
        budgets, differences, spreads = [], [], []
        seeds = sorted(set(cyclic.seeds) & set(sweep.seeds))
        for budget in (b for b in cyclic.budgets if b in sweep.budgets):
            a = cyclic.accuracy[[cyclic.seeds.index(s) for s in seeds], cyclic.budgets.index(budget)]
            b = sweep.accuracy[[sweep.seeds.index(s) for s in seeds], sweep.budgets.index(budget)]
            if seeds:
                budgets.append(budget)
                differences.append(paired_t_difference(list(a), list(b)))
                spreads.append(t_interval(list(b)))
        checks[cyclic.family_hash] = CyclicCheck(budgets, differences, spreads)
    return checks
