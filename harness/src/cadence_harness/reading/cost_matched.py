"""Cost-matched runs: the longer budget a method that saves cost per step needs before its speedup can be read.

Such a method's curve can end below the baseline's best accuracy while its longest run still costs less than the
baseline needs to reach it: the study's budgets never gave it the baseline's cost, so "does not reach" says
nothing yet. Its longest budget, stretched until it spends what the baseline spends to reach its best
(`TargetSpeedup.bound`), is the run that decides it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cadence_harness.records import budget_value

__all__ = ["SAVING_MARGIN", "cost_matched_budget", "cost_matched_markdown", "stretch"]

SAVING_MARGIN = 0.95  # a method saves cost per step where its longest run costs at most this share of the baseline's


def cost_matched_budget(longest: str, flops: float, base_flops: float, bound: float | None) -> str | None:
    """The budget a curve needs when it saves FLOPs per step (its longest run, `longest`, costs `flops`, at most
    `SAVING_MARGIN` of the baseline's `base_flops` at that budget: FLOPs show a saving exactly, where time would
    mistake one run's noise for one) yet never reached the baseline's best accuracy: `longest` stretched by
    `bound`, the baseline's cost to reach its best over the curve's longest run's (`TargetSpeedup.bound`, read
    off the mean curves). None where it saves nothing, or already got the baseline's cost."""
    if flops > SAVING_MARGIN * base_flops or bound is None or bound <= 1:
        return None
    return stretch(longest, bound)


def stretch(budget: str, factor: float) -> str:
    """`budget` times `factor`, rounded up to a whole number of its unit (``"16ep"``, 1.9 -> ``"31ep"``)."""
    unit = budget.lstrip("0123456789.")
    return f"{math.ceil(budget_value(budget) * factor - 1e-9)}{unit}"


def cost_matched_markdown(study: str, longer: Mapping[str, str], budgets: Sequence[str], seeds: int) -> str:
    """The cost-matched runs `longer` (arm -> budget) names, with the ``cadence-bench grid`` commands that add
    each budget to the study's `budgets` on all `seeds`."""
    runs = ", ".join(f"{method} at {budget}" for method, budget in longer.items())
    commands = []
    for budget in dict.fromkeys(longer.values()):
        durations = ", ".join(f'"{b}"' for b in [*budgets, budget])
        alone = ",".join(m for m, b in longer.items() if b == budget and "+" not in m)
        together = [m for m, b in longer.items() if b == budget and "+" in m]  # Mild, the recipe
        arms = [f"--arms each --methods {alone}"] if alone else []
        arms += [f"--set 'grid.arms=[]' --set 'grid.combinations=[]' --combination {arm}" for arm in together]
        commands += [
            f"`cadence-bench grid {study} {arm} --seeds {seeds} --set 'durations=[{durations}]' "
            "--data-dir ../shared/data`"
            for arm in arms
        ]
    return (
        "Cost-matched runs needed: these methods save cost per step, and their curves end below the baseline's "
        "best accuracy while their longest run costs less than the baseline needs to reach it, so the study's "
        "budgets never gave them the baseline's cost. Each needs a run at the budget that spends about what the "
        f"baseline spends to reach its best accuracy ({runs}), on every seed, before its speedup can be read: "
        + "; ".join(commands)
        + " (the runs already recorded are skipped; only the longer budget runs)."
    )
