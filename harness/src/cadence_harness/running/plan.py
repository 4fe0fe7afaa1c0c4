"""A recipe's grid as its runs: the arms (`Recipe.grid`) times the budgets (`cadence_harness.running.budgets`)
times the seeds, in the order a grid runs them."""

from __future__ import annotations

import itertools

from cadence_harness.records import run_length_reason
from cadence_harness.running.budgets import follows_run_length, leaf_recipes
from cadence_harness.running.recipe import Recipe
from cadence_harness.running.runspec import RunSpec

__all__ = ["expand", "swept_instead"]


def _arms(recipe: Recipe) -> list[tuple[str, ...]]:
    methods = recipe.grid_methods
    arms: list[tuple[str, ...]] = []
    for kind in recipe.grid.get("arms", []):
        if kind == "baseline":
            arms.append(())
        elif kind == "each":
            arms += [(m,) for m in methods]
        elif kind == "leave_one_out" and len(methods) > 1:
            arms += [tuple(x for x in methods if x != m) for m in methods]
        elif kind == "pairs":
            arms += list(itertools.combinations(methods, 2))
        elif kind == "all" and methods:
            arms.append(tuple(methods))
    arms += [tuple(combo) for combo in recipe.grid.get("combinations", [])]
    unique: dict[tuple[str, ...], tuple[str, ...]] = {}
    for arm in arms:  # the same set of methods once, in the order first listed
        unique.setdefault(tuple(sorted(arm)), arm)
    return list(unique.values())


def expand(recipe: Recipe) -> list[RunSpec]:
    """Every run of the grid, interleaved: seed by seed and, within a seed, budget by budget, each arm in turn.

    A grid runs them in this order (one at a time by default), so a slow or busy stretch of a shared
    machine falls on every arm alike instead of on the arms that happened to run then, and a partial
    grid is already comparable (all arms of seed 0 first). The arms' order alternates from one block (a
    seed at a budget) to the next, forwards then backwards: a drift that starts inside a block (a
    machine getting slower over minutes) then favours the arms late in a block once and early in the
    next, instead of always the same arms against the baseline, which heads every other block. For a
    cyclic curve: every arm's cyclic run, then the baseline's sweep, seed by seed (and the sweep of each
    arm in `swept_instead`).
    """
    arms = _arms(recipe)
    leaves = {arm: leaf_recipes(recipe, arm) for arm in arms}
    depth = max((len(runs) for runs in leaves.values()), default=0)
    blocks = [(seed, step) for seed in recipe.seeds for step in range(depth)]
    return [
        RunSpec(leaves[arm][step][1], arm, seed, leaves[arm][step][0])
        for block, (seed, step) in enumerate(blocks)
        for arm in (arms if block % 2 == 0 else arms[::-1])
        if step < len(leaves[arm])
    ]


def swept_instead(recipe: Recipe) -> str | None:
    """What a cyclic grid runs as sweeps and why, in words, or None: the arms with a method that follows the
    elapsed fraction of the run (`cadence_harness.running.budgets.follows_run_length`)."""
    if recipe.curve != "cyclic" or not recipe.durations:
        return None
    found = {"+".join(arm): follows_run_length(recipe, arm) for arm in _arms(recipe)}
    found = {arm: methods for arm, methods in found.items() if methods}
    if not found:
        return None
    methods = sorted({m for names in found.values() for m in names})
    return f"{', '.join(found)} run their sweep ({', '.join(recipe.durations)}), not one cyclic run: " + (
        run_length_reason(methods)
    )
