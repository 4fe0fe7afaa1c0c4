"""A study: the runs of one recipe's grid, as committed in ``method_cards/runs/<recipe>.jsonl``.

The method cards are written only from a study (`cadence-bench report --study NAME --cards`). Its
runs are the records in that file whose configuration belongs, with the recipe's settings, to the
grid of the recipe of the same name; to an arm added to that grid (``grid NAME --combination a+b``:
the combinations the recipe search asks for, as a sweep or, to screen them, as a cyclic curve); or to
the baseline's cyclic curve (``grid NAME --curve cyclic --arms baseline --set grid.combinations=[]``),
which the report checks against the sweep. Any other record there (a smoke run into the same
experiment, a run of an older version of the recipe) is left out and counted, so a card never shows
numbers the recipe did not produce.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cadence_harness.running.recipe import Recipe, RecipeError, load_recipe
from cadence_harness.records import RunRecord, read_records, records_file

__all__ = ["studies_runs", "study_runs"]


def study_runs(study: str, records_dir: str | Path) -> tuple[str, list[RunRecord], str]:
    """The name of the study `study` (a shipped recipe's name or a recipe file), its runs, and a line saying
    which records were kept."""
    from cadence_harness.running.grid import expand

    try:
        recipe = load_recipe(study)
    except RecipeError as error:
        raise RecipeError(f"`--study` {study!r}: a study is the grid of a recipe, but: {error}") from None
    path = records_file(records_dir, recipe.name)
    if not path.is_file():
        raise RecipeError(
            f"`--study` {study!r}: no run records at {path}; `cadence-bench grid {study}` writes them there as its "
            "runs finish (or pass --records FOLDER)"
        )
    runs = [r for r in read_records([path]) if r.experiment == recipe.name]
    own = expand(recipe)
    grid = {spec.config_hash for spec in own} | _cyclic_baseline(study, recipe)
    grid |= _added_arms(study, recipe, {r.arm for r in runs if r.config_hash not in grid} - {s.arm_name for s in own})
    kept = [r for r in runs if r.config_hash in grid]
    note = f"study {recipe.name}: {len(kept)} of the {len(runs)} runs in {path} belong to the grid of its recipe"
    if len(kept) < len(runs):
        note += f"; the other {len(runs) - len(kept)} (other settings, or an older recipe) are left out"
    return recipe.name, kept, note


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


def _sweeps(recipe: Recipe) -> bool:
    """Whether the recipe's curves are duration sweeps, beside which cyclic runs check (the baseline's) or
    screen (the recipe search's combinations) them."""
    return bool(recipe.durations) and recipe.curve != "cyclic"


def _cyclic_baseline(study: str, recipe: Recipe) -> set[str]:
    """The config hashes of the baseline's cyclic runs with the recipe's settings: kept, so that the study's
    report checks the cyclic curve against its sweep (Portes et al. 2022)."""
    from cadence_harness.running.budgets import cycles_of
    from cadence_harness.running.grid import expand

    if not _sweeps(recipe):
        return set()
    cyclic = load_recipe(study, {"curve": "cyclic"}, grid={"arms": ["baseline"], "combinations": []})
    return {spec.config_hash for spec in expand(cyclic) if cycles_of(spec.recipe)}


def _added_arms(study: str, recipe: Recipe, arms: set[str]) -> set[str]:
    """The config hashes of `arms` (outside the recipe's own grid) run with the recipe's settings, as ``grid
    STUDY --combination ARM`` runs them, and in a sweep study as ``... --curve cyclic`` too (the recipe
    search's screens); an arm the recipe cannot run (a method not installed here) adds nothing."""
    from cadence_harness.running.grid import expand

    curves = [{}, {"curve": "cyclic"}] if _sweeps(recipe) else [{}]
    hashes: set[str] = set()
    for arm in sorted(arms):
        for overrides in curves:
            try:
                added = load_recipe(study, overrides, grid={"arms": ["baseline"], "combinations": [arm.split("+")]})
            except RecipeError:
                break
            hashes |= {spec.config_hash for spec in expand(added) if spec.arm_name == arm}
    return hashes
