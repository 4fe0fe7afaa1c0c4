"""A study: the runs of one recipe's grid, as committed in ``method_cards/runs/<recipe>.jsonl``.

The method cards are written only from a study (`cadence-bench report --study NAME --cards`). Its
runs are the records in that file that carry the study's name (``cadence.study``): the grid tags a
run with its study and its role (its own arm, an arm added to the grid, the baseline's cyclic curve, an
arm at a longer budget) when the run is written (`cadence_harness.running.membership`). Any other record
there (a smoke run into the same experiment, a run of an older version of the recipe) is left out and
counted, so a card never shows numbers the recipe did not produce, and the report is the same on every
machine.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from pathlib import Path

from cadence_harness.records import RunRecord, read_records, records_file

__all__ = ["StudyError", "experiment_runs", "studies_runs", "study_runs"]


class StudyError(ValueError):
    """A study that cannot be read or reported: the message names the study and what to do."""


def experiment_runs(
    name: str, records_dir: str | Path, asked_as: str, grid: str | None = None
) -> tuple[Path, list[RunRecord]]:
    """The record file of experiment `name` and its runs. A missing file is refused naming `asked_as` (the argument
    that asked for it) and what to do: the grid that writes it when the caller knows one (`grid`: the recipe
    ``cadence-bench grid`` takes), else the closest names of the record files there, a misspelling's fix (a
    grid command of a misspelled name would fail too)."""
    path = records_file(records_dir, name)
    if not path.is_file():
        if grid is not None:
            hint = f"`cadence-bench grid {grid}` writes them there as its runs finish (or pass --records FOLDER)"
        else:
            there = sorted(p.stem for p in path.parent.glob("*.jsonl"))
            close = difflib.get_close_matches(name, there, n=2)
            guess = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            hint = f"{guess}records there: {', '.join(there) or 'none'} (or pass --records FOLDER)"
        raise StudyError(f"{asked_as}: no run records at {path}; {hint}")
    return path, [r for r in read_records([path]) if r.experiment == name]


def study_runs(study: str, records_dir: str | Path, recipes: Collection[str] = ()) -> tuple[str, list[RunRecord], str]:
    """The name of the study `study` (a recipe's name; a recipe file's stem), its runs, and a line saying which
    records were kept. `recipes`: the shipped recipes' names, which a refusal may name as the grid to run."""
    name = Path(study).stem if Path(study).suffix in (".toml", ".yaml", ".yml") else study
    grid = study if study in recipes or Path(study).is_file() else None
    path, runs = experiment_runs(name, records_dir, f"`--study` {study!r}", grid)
    kept = [r for r in runs if r.tag("study") == name]
    note = f"study {name}: {len(kept)} of the {len(runs)} runs in {path} belong to the grid of its recipe"
    if len(kept) < len(runs):
        note += f"; the other {len(runs) - len(kept)} (other settings, or an older recipe) are left out"
    return name, kept, note


def studies_runs(
    given: Sequence[str], records_dir: str | Path, recipes: Collection[str] = ()
) -> tuple[list[str], list[RunRecord], list[str]]:
    """`study_runs` of each study named in `given` (each entry one name or several separated by commas),
    in order and once each: their names, all their runs, and a note per study."""
    names, runs, notes = [], [], []
    for study in dict.fromkeys(n.strip() for entry in given for n in entry.split(",") if n.strip()):
        name, kept, note = study_runs(study, records_dir, recipes)
        names.append(name)
        runs += kept
        notes.append(note)
    return names, runs, notes
