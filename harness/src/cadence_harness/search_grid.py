"""Run a study's recipe search to its end: ``cadence-bench grid STUDY --search``.

`cadence_harness.reading.combination_search` reads a study's records and, where a round's runs are missing, names
them. This module closes the loop. It first completes the study's own grid, whose curves the search
reads (a search on a partial study would screen against a provisional target). Then it reads the
study's records (as ``report --study`` does), runs the search in FLOPs and in training time, runs
the combinations either one waits for with the grid (on seed 0 to screen a round, by one cyclic run
each where the study has its baseline's cyclic curve; by the sweep on all the baseline's seeds to
confirm a leader), whose runs are appended to the same records, and reads again,
until neither search waits for anything it can run here. A time search runs only on its baseline's machine
(times of different machines are never compared): elsewhere it is read, and the search says where its runs
must run; there, the arms it reads that ran elsewhere run again first (``grid --rerun-elsewhere``: the study's
own grid, then a round's candidates). Interrupted, it continues where it stopped: the grid skips
the runs the records hold. A round that asks again for runs it has just made stops the loop (with
exit code 1) instead of running forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadence_harness.reading.combination_search import Search, grid_command, section_searches
from cadence_harness.reading.study import study_runs
from cadence_harness.reading.summaries import sections_of
from cadence_harness.reading.tradeoff import COSTS
from cadence_harness.records import RunRecord
from cadence_harness.running.recipe import Recipe, load_recipe

__all__ = ["elsewhere", "missing_runs", "pending_reruns", "pending_runs", "run_search", "runs_here", "searches"]


def searches(runs: list[RunRecord]) -> list[Search]:
    """The recipe searches of every tradeoff section of a study's runs, in FLOPs and in training time."""
    return [search for section in sections_of(runs) if section.has_tradeoff for search in section_searches(section)]


def missing_runs(study: str, runs: list[RunRecord]) -> int:
    """How many runs of the study's own grid its runs (`study_runs`) lack."""
    from cadence_harness.running.plan import expand

    done = {run.config_hash for run in runs}
    return sum(spec.config_hash not in done for spec in expand(load_recipe(study)))


def pending_runs(found: list[Search], machine: str | None = None) -> list[tuple[int, str, tuple[str, ...]]]:
    """(seeds, curve, combinations) the searches wait for, fewest seeds first: screening (1 seed) before
    confirmation (every seed, by the sweep). A combination that both units ask for runs once, in the
    first spelling asked (``a+b`` and ``b+a`` are one arm to the search, which reads an arm as a set of
    methods). Given `machine` (`records.machine_name`), a time search waits only for runs on it: one whose
    baseline ran elsewhere is left to `elsewhere`."""
    wanted: dict[tuple[int, str], dict[frozenset[str], str]] = {}
    for search in found:
        if machine is not None and not runs_here(search, machine):
            continue
        arms = wanted.setdefault((search.seeds if search.confirming else 1, search.curve), {})
        for arm in search.to_run:
            arms.setdefault(frozenset(arm.split("+")), arm)
    return [(seeds, curve, tuple(arms.values())) for (seeds, curve), arms in sorted(wanted.items()) if arms]


def pending_reruns(found: list[Search], machine: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(seeds, curve, candidates) that time searches whose baseline ran on `machine` wait for to run again
    there (`Search.rerun`: they ran elsewhere), each batch once."""
    batches = {batch for search in found if search.machine == machine for batch in search.rerun_batches()}
    return sorted(batches)


def runs_here(search: Search, machine: str) -> bool:
    """Whether `search`'s runs can run on `machine`: anywhere for FLOPs, only on the baseline's machine for a time
    (a time measured elsewhere is never compared with the baseline's; `reading.tradeoff.other_machine`)."""
    return search.machine == "" or search.machine == machine


def elsewhere(found: list[Search], machine: str) -> list[str]:
    """What the searches that cannot run on `machine` wait for, and where it must run, in words."""
    lines = []
    for search in found:
        waits = [*search.own_elsewhere, *search.to_run, *search.rerun]
        if waits and not runs_here(search, machine):
            where = f"on {search.machine}" if search.machine else "nowhere: its baseline ran on several machines"
            lines.append(
                f"the {COSTS[search.unit]} search waits for {', '.join(waits)} {where}; "
                f"this machine is {machine}, so they do not run here (times compare only within one machine)"
            )
    return lines


def run_search(
    study: str,
    *,
    records_dir: str | Path,
    run_grid: Callable[..., Any],
    dry_run: bool = False,
    max_rounds: int = 50,
    machine: str | None = None,
    time_limit_s: float | None = None,
    **grid_options: Any,
) -> int:
    """Alternate reading the search and running what it waits for (`run_grid` with `grid_options`);
    prints each step and, at the end, each search's outcome. Returns a process exit code.

    `machine` is where the runs run (`records.machine_name`; None: this one, as the study's runs would record
    it): a time search whose baseline ran on another machine is read but not run here.
    `time_limit_s`: no run starts once that many seconds have passed, over all the grids (rerun to go on)."""
    if machine is None:
        from cadence_harness.running.provenance import machine_on

        machine = machine_on(load_recipe(study).device)
    asked: set[tuple[int, str, tuple[str, ...], bool]] = set()
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s

    def run_once(key: tuple[int, str, tuple[str, ...]], recipe: Recipe, again: str, rerun: bool = False) -> int | None:
        """Run `recipe`'s grid (`rerun`: with ``rerun_elsewhere``); None: go on, else the search's exit code: 1
        where `key` ran before (then say `again`) or a run failed, 0 once the time limit has passed."""
        if (*key, rerun) in asked:
            print(f"{again}; stopping ({study})")
            return 1
        asked.add((*key, rerun))
        options = {**grid_options, **({"rerun_elsewhere": True} if rerun else {})}
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None:
            options["time_limit_s"] = left
        result = None if left is not None and left <= 0 else run_grid(recipe, records_dir=records_dir, **options)
        if result is not None:
            print(result.summary(), flush=True)
            if result.failed:
                return 1
        if result is None or result.not_started:
            print(f"the time limit has passed: `cadence-bench grid {study} --search` goes on from here", flush=True)
            return 0
        return None

    for _ in range(max_rounds):
        _, runs, _ = study_runs(study, records_dir)
        missing = missing_runs(study, runs)
        if missing:  # the search reads the study's complete curves: its own grid comes first
            print(
                f"the study's own grid lacks {missing} runs, which come first: cadence-bench grid {study}", flush=True
            )
            if dry_run:
                return 0
            again = "these runs were made, yet the study still lacks them"
            if (code := run_once((0, "", ()), load_recipe(study), again)) is not None:
                return code
            continue
        found = searches(runs)
        if own := sorted({arm for search in found if search.machine == machine for arm in search.own_elsewhere}):
            print(
                f"the training time search cannot rank {', '.join(own)}, which ran alone on another machine than "
                f"its baseline; they run again here first: cadence-bench grid {study} --rerun-elsewhere",
                flush=True,
            )
            if dry_run:
                return 0
            again = "these runs ran here, yet the search reads them from another machine"
            if (code := run_once((0, "", ()), load_recipe(study), again, rerun=True)) is not None:
                return code
            continue
        batches = [(*batch, False) for batch in pending_runs(found, machine)]
        batches += [(*batch, True) for batch in pending_reruns(found, machine)]
        if not batches:
            print("\n\n".join(search.markdown() for search in found) or f"{study}: no tradeoff curves to search")
            _say(elsewhere(found, machine))
            return 0
        for seeds, curve, combinations, rerun in batches:
            print(f"the search waits for: {grid_command(study, combinations, seeds, curve, rerun)}", flush=True)
            if dry_run:
                continue
            grid = {"arms": ["baseline"], "combinations": [arm.split("+") for arm in combinations]}
            recipe = load_recipe(study, {"seeds": seeds, "curve": curve}, grid=grid)
            again = "these runs were made, yet the search asks for them again"
            if (code := run_once((seeds, curve, combinations), recipe, again, rerun=rerun)) is not None:
                return code
        if dry_run:
            _say(elsewhere(found, machine))
            return 0
    print(f"the search of {study} did not end within {max_rounds} rounds; run it again to go on")
    return 1


def _say(lines: list[str]) -> None:
    for line in lines:
        print(line)
