"""Budgets: a sweep of durations, every schedule fully decayed at each budget, the cyclic schedule, and
grids that run interleaved (round-robin over seeds, budgets and arms) in the order `expand` gives."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cadence.time import Time
from cadence_harness.running import grid as grid_module
from cadence_harness.running.budgets import CyclicScheduler, build_schedulers
from cadence_harness.running.grid import run_grid, select_shard
from cadence_harness.running.plan import expand, swept_instead
from cadence_harness.running.recipe import RECIPES_DIR, Recipe, RecipeError, load_recipe
from cadence_harness.running.recipe_checks import SCHEDULES

SWEEP = {
    "durations": ["2ba", "4ba", "8ba"],
    "duration": "8ba",
    "schedule": {"name": "cosine_warmup", "t_warmup": "0.25dur"},
}


class Clock:
    """What a schedule reads of `State`: the batch, and times in batches (``dur`` of a run of `total`)."""

    def __init__(self, batch: int, total: int):
        self.timestamp = SimpleNamespace(batch=batch)
        self.total = total

    def to_batches(self, time: Any) -> int:
        time = Time.from_input(time)
        return round(time.value * self.total) if time.unit.value == "dur" else int(time.value)


def test_a_sweep_is_checked_and_sets_the_longest_duration(tiny_recipe: Any) -> None:
    recipe = tiny_recipe(**SWEEP)
    assert recipe.durations == ("2ba", "4ba", "8ba") and recipe.duration == "8ba"
    bad = [
        ({"durations": ["4ba", "2ba"]}, r"`durations` = \['4ba', '2ba'\]: budgets must increase"),
        ({"durations": ["2ba", "1ep"]}, r"give every budget in one unit"),
        ({"durations": ["2ba"]}, r"at least two budgets"),
        ({"durations": ["2ba", "4ba"], "duration": "3ba"}, r"`duration` = '3ba': the recipe also gives `durations`"),
        ({"curve": "cyclic", "durations": []}, r"`curve` = 'cyclic': a cyclic curve needs `durations`"),
        ({"curve": "cylic"}, r"`curve` = 'cylic': must be one of 'sweep', 'cyclic'"),
        ({"schedule": {"name": "constant"}}, r"`schedule.name` = 'constant': with `durations`, the learning rate must"),
        ({"schedule": {"name": "cosine", "t_max": "8ba"}}, r"`schedule.t_max` = '8ba': with `durations`, every"),
        ({"schedule": {"name": "multistep", "milestones": ["0.5dur", "6ba"]}}, r"`schedule.milestones`"),
        ({"schedule": {"name": "cosine", "cycles": ["2ba"]}}, r"unknown key `schedule.cycles`"),
    ]
    for changes, message in bad:
        with pytest.raises(RecipeError, match=message):
            tiny_recipe(**{**SWEEP, **changes})


def test_one_budget_or_a_sweep_given_on_the_command_line_replaces_the_other(tiny_recipe_file: Any) -> None:
    recipe = load_recipe(tiny_recipe_file(**SWEEP), {"duration": "3ba"})  # --duration 3ba, or --set duration=3ba
    assert recipe.durations == () and recipe.duration == "3ba"
    one_budget = tiny_recipe_file(schedule=SWEEP["schedule"])
    recipe = load_recipe(one_budget, {"durations": ["1ba", "2ba"]})  # --set durations=[...] on a one-budget recipe
    assert recipe.durations == ("1ba", "2ba") and recipe.duration == "2ba"


# Every schedule the harness ships ends fully decayed at every budget -------------------------
def _decaying_schedules() -> list[tuple[str, dict[str, Any]]]:
    kwargs = {"multistep": {"milestones": ["0.5dur", "0.75dur"]}, "multistep_warmup": {"milestones": ["0.5dur"]}}
    cases = []
    for name, cls in SCHEDULES.items():
        if cls is None:
            continue
        extra = dict(kwargs.get(name, {}))
        if "warmup" in name:
            extra["t_warmup"] = "0.1dur"
        cases.append((name, extra))
    return cases


@pytest.mark.parametrize(("name", "kwargs"), _decaying_schedules(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_shipped_schedule_is_fully_decayed_at_each_budget(name: str, kwargs: dict[str, Any]) -> None:
    recipe = Recipe(name="s", model="tv/resnet20", data="synthetic", duration="8ba", schedule={"name": name, **kwargs})
    (schedule,) = build_schedulers(recipe)
    for total in (20, 40, 80, 160):  # a run of each budget: its own schedule, fitted to its length
        end = schedule(Clock(total, total))
        assert end == schedule(Clock(10 * total, total)) < schedule(Clock(total // 5, total)), (name, total)


@pytest.mark.parametrize("path", sorted(RECIPES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_can_sweep_durations(path: Path) -> None:
    recipe = load_recipe(path, {"durations": ["1ep", "2ep"]})
    assert recipe.durations == ("1ep", "2ep")


def test_the_cyclic_schedule_is_the_recipe_schedule_fitted_to_each_cycle() -> None:
    warm = {"name": "cosine_warmup", "t_warmup": "0.25dur"}
    cyclic = CyclicScheduler(["8ba", "16ba", "32ba"], **warm)
    (first_run,) = build_schedulers(Recipe(name="s", model="m", data="d", duration="8ba", schedule=warm))
    values = [cyclic(Clock(b, 32)) for b in range(33)]
    assert values[:8] == [first_run(Clock(b, 8)) for b in range(8)]  # the first cycle is the shortest run, exactly
    assert values[0] == 0.0 and values[2] == 1.0  # warm-up over 2 batches, in the first cycle only
    assert values[8] == 1.0 and values[16] == 1.0  # later cycles restart at the peak, without warm-up
    for start, end in ((2, 8), (8, 16), (16, 32)):  # each cycle decays to (almost) zero at its end
        assert all(a > b for a, b in zip(values[start : end - 1], values[start + 1 : end])) and values[end - 1] < 0.07
    assert values[32] == 0.0
    assert values[12] == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    with pytest.raises(ValueError, match=r"cycle_ends=\[\]: give where each cycle ends"):
        CyclicScheduler([])
    with pytest.raises(ValueError, match="needs a decaying schedule, not 'constant'"):
        CyclicScheduler(["8ba"], name="constant")


# Grids are interleaved ----------------------------------------------------------------------
def test_a_sweep_expands_seed_by_seed_budget_by_budget_arm_by_arm_in_alternating_order(
    tiny_recipe: Any, explode_plugin: Any
) -> None:
    methods = {"count": {}, "tuples_only": {}}
    recipe = tiny_recipe(**SWEEP, seeds=[0, 1], methods=methods, grid={"arms": ["baseline", "each"]})
    specs = expand(recipe)
    arms = ["baseline", "count", "tuples_only"]
    blocks = [(seed, budget) for seed in (0, 1) for budget in SWEEP["durations"]]
    expected = [(*block, arm) for i, block in enumerate(blocks) for arm in (arms if i % 2 == 0 else arms[::-1])]
    assert [(s.seed, s.recipe.duration, s.arm_name) for s in specs] == expected  # forwards, backwards, ...
    for start in range(0, len(specs), len(arms)):  # every stretch of len(arms) runs holds each arm once
        assert sorted(s.arm_name for s in specs[start : start + len(arms)]) == arms
    assert specs[1].run_name == "count-2ba-s0" and specs[1].recipe.durations == ()
    assert len({s.config_hash for s in specs}) == len(specs) and len({s.curve_hash for s in specs}) == 3
    assert len({s.family_hash for s in specs}) == 1
    shards = [select_shard(specs, i, 2) for i in (1, 2)]
    for shard in shards:  # each machine of a sharded grid interleaves the arms too
        assert all(sorted(s.arm_name for s in shard[i : i + 3]) == arms for i in range(0, len(shard), 3))


def test_a_cyclic_curve_is_one_run_per_arm_and_seed_plus_the_baseline_sweep(tiny_recipe: Any) -> None:
    recipe = tiny_recipe(**SWEEP, curve="cyclic", seeds=[0, 1])
    recipe = Recipe.from_dict({**recipe.to_dict(), "methods": {"blurpool": {}}, "grid": {"arms": ["baseline", "each"]}})
    names = [s.run_name for s in expand(recipe)]
    assert names == [
        *["baseline-cyclic-s0", "blurpool-cyclic-s0", "baseline-2ba-s0", "baseline-4ba-s0", "baseline-8ba-s0"],
        *["baseline-cyclic-s1", "blurpool-cyclic-s1", "baseline-2ba-s1", "baseline-4ba-s1", "baseline-8ba-s1"],
    ]
    cyclic = expand(recipe)[0]
    assert cyclic.cycles == ("2ba", "4ba", "8ba") and cyclic.recipe.duration == "8ba"
    assert cyclic.family_hash == expand(recipe)[2].family_hash != cyclic.curve_hash
    assert swept_instead(recipe) is None


def test_an_arm_that_follows_the_runs_length_runs_its_sweep_in_a_cyclic_grid(tiny_recipe: Any) -> None:
    """Progressive resizing picks its sizes by the elapsed fraction of the run: in one cyclic run, the early
    cycles would train at the small sizes only, unlike its runs of those budgets. So it runs the sweep, with
    any arm it is part of, and the grid says why; ColOut's cyclic run stands for its budgets."""
    recipe = tiny_recipe(**SWEEP, curve="cyclic")
    methods = {"progressive_resizing": {}, "colout": {}}
    grid = {"arms": ["baseline", "each"], "combinations": [["colout", "progressive_resizing"]]}
    recipe = Recipe.from_dict({**recipe.to_dict(), "methods": methods, "grid": grid})
    labels = {arm: [s.label for s in expand(recipe) if s.arm_name == arm] for arm in ("colout", "baseline")}
    assert labels == {"colout": ["cyclic"], "baseline": ["cyclic", "2ba", "4ba", "8ba"]}
    for arm in ("progressive_resizing", "colout+progressive_resizing"):
        assert [s.label for s in expand(recipe) if s.arm_name == arm] == ["2ba", "4ba", "8ba"], arm
    assert swept_instead(recipe) == (
        "progressive_resizing, colout+progressive_resizing run their sweep (2ba, 4ba, 8ba), not one cyclic run: "
        "progressive_resizing follows the elapsed fraction of the run, which no cycle of a cyclic run restarts"
    )
    sweep = Recipe.from_dict({**recipe.to_dict(), "curve": "sweep"})
    swept = {s.config_hash for s in expand(recipe) if s.arm_name == "progressive_resizing"}
    assert swept == {s.config_hash for s in expand(sweep) if s.arm_name == "progressive_resizing"}  # the same runs
    assert swept_instead(sweep) is None


def test_a_grid_runs_in_the_order_expand_gives(
    tiny_recipe: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = {**tiny_recipe(**SWEEP, seeds=[0, 1]).to_dict(), "methods": {"a": {}, "b": {}}}
    recipe = Recipe.from_dict({**values, "grid": {"arms": ["baseline", "each"]}})
    started: list[str] = []
    monkeypatch.setattr(grid_module, "check_arms", lambda *args, **kwargs: None)
    monkeypatch.setattr(grid_module, "run_one_in_subprocess", lambda spec, **kwargs: started.append(spec.run_name))
    done = {expand(recipe)[4].config_hash: "run"}  # one run already finished: skipped, the order kept
    monkeypatch.setattr(grid_module, "finished_config_hashes", lambda uri, experiment: done)
    result = run_grid(recipe, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, log_dir=tmp_path)
    assert started == [s.run_name for s in expand(recipe) if s.config_hash not in done]
    assert len(result.skipped) == 1 and len(result.finished) == len(expand(recipe)) - 1
