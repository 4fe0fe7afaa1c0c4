"""Which study a run belongs to, and in which role, decided when the run is written (not when it is read).

A study is the grid of a shipped recipe run with the recipe's own settings. A run of recipe NAME
belongs to the study NAME when its configuration (its config hash) is one of:

* ``own``: a run of the recipe's own grid;
* ``added``: an arm added to that grid (``grid NAME --combination a+b``: the combinations the
  combination search asks for, as a sweep or, to screen them in a sweep study, as a cyclic curve);
* ``cyclic_baseline``: the baseline's cyclic curve in a sweep study (``grid NAME --curve cyclic
  --arms baseline --set grid.combinations=[]``), which the report checks against the sweep;
* ``longer``: an arm of the study (own or added) at a budget beyond the recipe's durations, with the recipe's
  settings otherwise: the cost-matched runs the combination search asks for (``grid NAME --arms each --methods
  colout --set 'durations=[..., "22ep"]'``), which extend the arm's curve.

Each role holds on any seed: a run of the same configuration on a seed beyond the recipe's (``grid NAME --arms
baseline --seeds 5``, where the recipe search needs more seeds to decide a recipe) is in the study in the same
role, and the reading pairs arms with the baseline seed by seed.

Any other run of the same experiment (a smoke run with ``--set subset=...``, a run of an older version
of the recipe) carries no study, and a report of the study leaves it out. The grid tags each run with
``cadence.study`` and ``cadence.role``; the reading wing filters on them and never re-expands a grid,
so a report is the same on a machine without the method packages the grid used.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from cadence_harness.records import TAG, RunRecord, read_records
from cadence_harness.running.budgets import cycles_of
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import Recipe, RecipeError, load_recipe

__all__ = ["ROLES", "StudyMembership", "tag_records"]

ROLES = ("own", "added", "cyclic_baseline", "longer")


class StudyMembership:
    """The roles of configurations in the study of the recipe `source` (a shipped recipe's name or a recipe file,
    loaded with its own settings); the study is named after the recipe. Arms outside its own grid are priced
    when first asked for (each needs the recipe reloaded with the arm added)."""

    def __init__(self, source: str | Path) -> None:
        self.source = str(source)
        try:
            self._recipe: Recipe | None = load_recipe(self.source)
        except RecipeError:
            self._recipe = None  # not a recipe one can load again (a dict, a file that is gone): no study
        self.study = self._recipe.name if self._recipe is not None else ""
        self._roles: dict[str, str] = {}
        self._priced: set[str] = set()
        self._priced_longer: set[tuple[str, str]] = set()
        if self._recipe is not None:
            self._price_own()

    def _price_own(self) -> None:
        """The recipe's own grid and the baseline's cyclic curve, on the seeds seen so far; arms outside the own
        grid are priced (again) when next asked for."""
        own = expand(self._recipe) if self._recipe is not None else []
        self._priced = {spec.arm_name for spec in own}
        self._priced_longer = set()
        for spec in own:
            self._roles.setdefault(spec.config_hash, "own")
        for config in self._cyclic_baseline():
            self._roles.setdefault(config, "cyclic_baseline")

    def role(self, config_hash: str, arm: str, budget: str = "", seed: int | None = None) -> str | None:
        """The role of the run with this configuration (of arm `arm`, at `budget`, on `seed`) in the study, or None
        if it is not in it."""
        if self._recipe is None:
            return None
        if seed is not None and seed >= 0 and seed not in self._recipe.seeds:  # more seeds: the same roles
            self._recipe = replace(self._recipe, seeds=(*self._recipe.seeds, seed))
            self._price_own()
        if arm not in self._priced:
            self._priced.add(arm)
            for config in self._added_arm(arm):
                self._roles.setdefault(config, "added")
        longer = budget and budget not in self._recipe.durations and (arm, budget) not in self._priced_longer
        if config_hash not in self._roles and longer:
            self._priced_longer.add((arm, budget))
            for config in self._longer_arm(arm, budget):
                self._roles.setdefault(config, "longer")
        return self._roles.get(config_hash)

    def tags(self, config_hash: str, arm: str, budget: str = "", seed: int | None = None) -> dict[str, str]:
        """``cadence.study`` and ``cadence.role`` for a run in the study; nothing for a run outside it."""
        role = self.role(config_hash, arm, budget, seed)
        return {} if role is None else {f"{TAG}study": self.study, f"{TAG}role": role}

    def _seeds(self) -> tuple[int, ...]:
        """The recipe's seeds and any other seed a run of the study was seen on."""
        return self._recipe.seeds if self._recipe is not None else ()

    def _sweeps(self) -> bool:
        """Whether the curves are duration sweeps, beside which cyclic runs check (the baseline's) or screen
        (the combination search's) them."""
        return self._recipe is not None and bool(self._recipe.durations) and self._recipe.curve != "cyclic"

    def _cyclic_baseline(self) -> set[str]:
        if not self._sweeps():
            return set()
        overrides = {"curve": "cyclic", "seeds": list(self._seeds())}
        cyclic = load_recipe(self.source, overrides, grid={"arms": ["baseline"], "combinations": []})
        return {spec.config_hash for spec in expand(cyclic) if cycles_of(spec.recipe)}

    def _longer_arm(self, arm: str, budget: str) -> set[str]:
        """The configurations of `arm` (the baseline, an own arm or an added one) at `budget`, with the recipe's
        settings otherwise; nothing where the recipe has no budgets (its one duration is its run)."""
        if self._recipe is None or not self._recipe.durations:
            return set()
        combinations = [] if arm == "baseline" else [arm.split("+")]
        overrides = {"durations": [*self._recipe.durations, budget], "seeds": list(self._seeds())}
        try:
            longer = load_recipe(self.source, overrides, grid={"arms": ["baseline"], "combinations": combinations})
        except RecipeError:
            return set()
        return {spec.config_hash for spec in expand(longer) if spec.arm_name == arm and spec.recipe.duration == budget}

    def _added_arm(self, arm: str) -> set[str]:
        """The configurations of `arm` run with the recipe's settings, as ``grid STUDY --combination ARM`` runs
        them (in a sweep study also as a cyclic curve); an arm the recipe cannot run adds nothing."""
        hashes: set[str] = set()
        seeds: dict[str, object] = {"seeds": list(self._seeds())}
        for overrides in [seeds, {**seeds, "curve": "cyclic"}] if self._sweeps() else [seeds]:
            try:
                added = load_recipe(
                    self.source, overrides, grid={"arms": ["baseline"], "combinations": [arm.split("+")]}
                )
            except RecipeError:
                break
            hashes |= {spec.config_hash for spec in expand(added) if spec.arm_name == arm}
        return hashes


def tag_records(path: str | Path, recipe: str | Path | None = None) -> tuple[int, int]:
    """Add ``cadence.study``/``cadence.role`` to the records in `path` that lack them (written before runs
    carried them, or logged to MLflow by other means than a grid) for the study of `recipe` (default: the
    shipped recipe named like the file); returns (records tagged now, records in the file). Records that
    carry a study, and runs outside the study, are left as they are; the file is rewritten in its order."""
    path = Path(path)
    membership = StudyMembership(recipe if recipe is not None else path.stem)
    records = read_records([path])
    tagged = list(_tagged(records, membership))
    changed = sum(1 for old, new in zip(records, tagged) if new is not old)
    if changed:
        path.write_text("".join(record.to_json() + "\n" for record in tagged), encoding="utf-8")
    return changed, len(records)


def _tagged(records: Iterable[RunRecord], membership: StudyMembership) -> Iterable[RunRecord]:
    for record in records:  # only the study's own experiment is asked: a foreign arm needs no recipe reloaded
        mine = record.experiment == membership.study and not record.tag("study")
        tags = membership.tags(record.config_hash, record.arm, record.budget, record.seed) if mine else {}
        yield replace(record, tags={**record.tags, **tags}) if tags else record
