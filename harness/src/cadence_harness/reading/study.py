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

from collections.abc import Sequence
from pathlib import Path

from cadence_harness.records import RunRecord, read_records, records_file

__all__ = ["StudyError", "experiment_runs", "studies_runs", "study_runs"]


class StudyError(ValueError):
    """A study that cannot be read or reported: the message names the study and what to do."""


def experiment_runs(name: str, records_dir: str | Path, asked_as: str) -> tuple[Path, list[RunRecord]]:
    """The record file of experiment `name` and its runs; a missing file is refused, naming `asked_as` (the
    argument that asked for it) and the grid that writes it."""
    path = records_file(records_dir, name)
    if not path.is_file():
        raise StudyError(
            f"{asked_as}: no run records at {path}; `cadence-bench grid {name}` writes them there as its "
            "runs finish (or pass --records FOLDER)"
        )
    return path, [r for r in read_records([path]) if r.experiment == name]


def study_runs(study: str, records_dir: str | Path) -> tuple[str, list[RunRecord], str]:
    """The name of the study `study` (a recipe's name; a recipe file's stem), its runs, and a line saying which
    records were kept."""
    name = Path(study).stem if Path(study).suffix in (".toml", ".yaml", ".yml") else study
    path, runs = experiment_runs(name, records_dir, f"`--study` {study!r}")
    kept = [r for r in runs if r.tag("study") == name]
    note = f"study {name}: {len(kept)} of the {len(runs)} runs in {path} belong to the grid of its recipe"
    if len(kept) < len(runs):
        note += f"; the other {len(runs) - len(kept)} (other settings, or an older recipe) are left out"
    return name, kept, note


def studies_runs(given: Sequence[str], records_dir: str | Path) -> tuple[list[str], list[RunRecord], list[str]]:
    """`study_runs` of each study named in `given` (each entry one name or several separated by commas),
    in order and once each: their names, all their runs, and a note per study."""
    names, runs, notes = [], [], []
    for study in dict.fromkeys(n.strip() for entry in given for n in entry.split(",") if n.strip()):
        name, kept, note = study_runs(study, records_dir)
        names.append(name)
        runs += kept
        notes.append(note)
    return names, runs, notes
