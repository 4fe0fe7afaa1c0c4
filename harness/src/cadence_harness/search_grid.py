"""Run a study's recipe search to its end: ``cadence-bench grid STUDY --search``.

`cadence_harness.recipe_search` reads a study's records and, where a round's runs are missing, names
them. This module closes the loop. It first completes the study's own grid, whose curves the search
reads (a search on a partial study would screen against a provisional target). Then it reads the
study's records (as ``report --study`` does), runs the search in FLOPs and in training time, runs
the combinations either one waits for with the grid (on seed 0 to screen a round, on all the
baseline's seeds to confirm a leader), whose runs are appended to the same records, and reads again,
until neither search waits for anything. Interrupted, it continues where it stopped: the grid skips
the runs the records hold. A round that asks again for runs it has just made stops the loop (with
exit code 1) instead of running forever.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadence_harness.recipe import load_recipe
from cadence_harness.recipe_search import Search, greedy_search, registry_conflict
from cadence_harness.report import sections_of
from cadence_harness.study import study_runs

__all__ = ["missing_runs", "pending_runs", "run_search", "searches"]

UNITS = ("flops", "train_s")


def searches(study: str, records_dir: str | Path) -> list[Search]:
    """The recipe search of every tradeoff section of `study`'s records, in FLOPs and in training time."""
    _, runs, _ = study_runs(study, records_dir)
    sections = [section for section in sections_of(runs) if section.has_tradeoff]
    return [greedy_search(section, unit, registry_conflict) for section in sections for unit in UNITS]


def missing_runs(study: str, records_dir: str | Path) -> int:
    """How many runs of the study's own grid its records lack."""
    from cadence_harness.grid import expand

    _, runs, _ = study_runs(study, records_dir)
    done = {run.config_hash for run in runs}
    return sum(spec.config_hash not in done for spec in expand(load_recipe(study)))


def pending_runs(found: list[Search]) -> list[tuple[int, tuple[str, ...]]]:
    """(seeds, combinations) the searches wait for, fewest seeds first: screening (1 seed) before
    confirmation (every seed). A combination that both units ask for runs once, in the first spelling
    asked (``a+b`` and ``b+a`` are one arm to the search, which reads an arm as a set of methods)."""
    wanted: dict[int, dict[frozenset[str], str]] = {}
    for search in found:
        arms = wanted.setdefault(search.seeds if search.confirming else 1, {})
        for arm in search.to_run:
            arms.setdefault(frozenset(arm.split("+")), arm)
    return [(seeds, tuple(arms.values())) for seeds, arms in sorted(wanted.items()) if arms]


def grid_command(study: str, seeds: int, combinations: tuple[str, ...]) -> str:
    combos = " ".join(f"--combination {arm}" for arm in combinations)
    return f"cadence-bench grid {study} --arms baseline {combos} --seeds {seeds}"


def run_search(
    study: str,
    *,
    records_dir: str | Path,
    run_grid: Callable[..., Any],
    dry_run: bool = False,
    max_rounds: int = 50,
    **grid_options: Any,
) -> int:
    """Alternate reading the search and running what it waits for (`run_grid` with `grid_options`);
    prints each step and, at the end, each search's outcome. Returns a process exit code."""
    asked: set[tuple[int, tuple[str, ...]]] = set()
    for _ in range(max_rounds):
        missing = missing_runs(study, records_dir)
        if missing:  # the search reads the study's complete curves: its own grid comes first
            print(
                f"the study's own grid lacks {missing} runs, which come first: cadence-bench grid {study}", flush=True
            )
            if dry_run:
                return 0
            if (0, ()) in asked:
                print(f"these runs were made, yet the study still lacks them; stopping ({study})")
                return 1
            asked.add((0, ()))
            result = run_grid(load_recipe(study), records_dir=records_dir, **grid_options)
            print(result.summary(), flush=True)
            if result.failed:
                return 1
            continue
        found = searches(study, records_dir)
        batches = pending_runs(found)
        if not batches:
            print("\n\n".join(search.markdown() for search in found) or f"{study}: no tradeoff curves to search")
            return 0
        for seeds, combinations in batches:
            print(f"the search waits for: {grid_command(study, seeds, combinations)}", flush=True)
            if dry_run:
                continue
            if (seeds, combinations) in asked:
                print(f"these runs were made, yet the search asks for them again; stopping ({study})")
                return 1
            asked.add((seeds, combinations))
            grid = {"arms": ["baseline"], "combinations": [arm.split("+") for arm in combinations]}
            recipe = load_recipe(study, {"seeds": seeds}, grid=grid)
            result = run_grid(recipe, records_dir=records_dir, **grid_options)
            print(result.summary(), flush=True)
            if result.failed:
                return 1
        if dry_run:
            return 0
    print(f"the search of {study} did not end within {max_rounds} rounds; run it again to go on")
    return 1
