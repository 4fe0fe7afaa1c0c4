"""The recipe search: speedup at the baseline's best accuracy, and greedy forward selection over a study's arms."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cadence import Effects, Resource
from cadence.engine import DeclaredMethod
from cadence_harness.reading.combination_search import greedy_search, section_searches
from cadence_harness.reading.cost_matched import cost_matched_budget
from cadence_harness.reading.noise_floor import NoiseFloor
from cadence_harness.reading.recorded_effects import RecordedEffects
from cadence_harness.reading.summaries import Section
from cadence_harness.reading.target_speedup import TargetSpeedup, gain_over, speedup_at_baseline_best
from cadence_harness.reading.tradeoff import Curve, matched_speedups
from cadence_harness.records import RunRecord, effects_param
from cadence_harness.testing import study_run

COSTS = [1.0, 2.0, 4.0]


def _curve(
    arm: str,
    accuracy: list[float],
    costs: list[float] = COSTS,
    jitter: float = 0.0,
    seeds: tuple[int, ...] = (0, 1, 2),
    cyclic: bool = False,
) -> Curve:
    acc = np.array([[a + jitter * (s - 1) for a in accuracy] for s in seeds])
    cost = np.array([costs for _ in seeds])
    budgets = ["1ep", "2ep", "4ep"]
    tag = "-cyclic" if cyclic else ""
    return Curve(arm, f"h-{arm}{tag}", f"h-baseline{tag}", "fam", cyclic, budgets, list(seeds), acc, {"flops": cost})


BASE = [0.50, 0.60, 0.70]


def _section(*curves: Curve, records: list[RunRecord] | None = None) -> Section:
    base = _curve("baseline", BASE)
    section = Section("study", "fam", "study", [], list(records or []), [base, *curves])
    for curve in curves:
        section.speedups[(curve.curve_hash, "flops")] = matched_speedups(curve, base, "flops")
    return section


FOLLOWS_LENGTH = DeclaredMethod("ProgressiveResizing", Effects(reads={Resource.INPUTS, Resource.DURATION}))
SAM = DeclaredMethod("SAM", Effects(exclusive={Resource.OPTIMIZER: "steps the optimizer twice"}))


def _declared(arm: str, *declared: DeclaredMethod, end_time: int = 0) -> RunRecord:
    """A run of `arm` whose params record what each of its methods (in arm order) declared, as a run logs it."""
    params = dict(effects_param(name, method) for name, method in zip(arm.split("+"), declared, strict=True))
    run = study_run(arm, "1ep", 0, accuracy=0.5, train_s=1.0, params=params)
    return dataclasses.replace(run, end_time=end_time)


def test_the_speedup_at_the_baseline_best_is_its_cost_over_the_arms_cost_to_reach_it() -> None:
    base = _curve("baseline", BASE)
    # 0.70 is reached at cost 2 by the arm; the baseline needs 4: 2x, the same on every seed
    faster = speedup_at_baseline_best(_curve("a", [0.60, 0.70, 0.75]), base, "flops")
    assert faster is not None and faster.value == pytest.approx(2.0) and faster.target == pytest.approx(0.70)
    assert faster.low == pytest.approx(2.0) and faster.high == pytest.approx(2.0) and faster.qualifies()
    # halfway between 0.65 (cost 2) and 0.75 (cost 4) in log cost: 2 * sqrt(2)
    between = speedup_at_baseline_best(_curve("b", [0.55, 0.65, 0.75]), base, "flops")
    assert between is not None and between.value == pytest.approx(4 / (2 * 2**0.5))
    assert not between.qualifies()  # 1.41x is below 1.5x


def test_a_curve_that_never_reaches_the_target_gives_only_a_bound() -> None:
    slower = speedup_at_baseline_best(_curve("c", [0.50, 0.55, 0.60]), _curve("baseline", BASE), "flops")
    assert slower is not None and slower.value is None and slower.bound == pytest.approx(1.0)
    assert slower.format() == "does not reach 70.0% (< 1.00x)" and not slower.qualifies()


def test_the_bound_of_a_curve_that_never_reaches_the_target_is_read_off_the_mean_curves() -> None:
    """On two seeds the t-interval's upper end is 12.7 standard errors out; the bound shown ("< 2.00x") is what
    the mean curve at its longest run spent against what the baseline needs, whatever the seeds' spread."""
    half = _curve("h", [0.55, 0.62, 0.66], costs=[0.5, 1.0, 2.0], jitter=0.02, seeds=(1, 2))
    short = speedup_at_baseline_best(half, _curve("baseline", BASE), "flops")
    assert short is not None and short.n == 2 and short.bound == pytest.approx(2.0)
    assert short.format() == "does not reach 70.0% (< 2.00x)"


def test_seed_noise_widens_the_interval() -> None:
    noisy = speedup_at_baseline_best(_curve("a", [0.60, 0.70, 0.75], jitter=0.05), _curve("baseline", BASE), "flops")
    assert noisy is not None and noisy.low < noisy.value < noisy.high


def test_greedy_selection_grows_the_best_single_method_while_a_candidate_improves() -> None:
    section = _section(
        _curve("a", [0.60, 0.70, 0.75]),  # 2x alone
        _curve("b", [0.55, 0.65, 0.75]),  # 1.41x alone
        _curve("c", [0.40, 0.50, 0.60]),  # worse at every budget: not eligible
        _curve("a+b", [0.70, 0.75, 0.80]),  # reaches 0.70 at its shortest budget: 4x
    )
    search = greedy_search(section, "flops")
    assert [(method, why) for method, _, why in search.singles] == [
        ("a", ""),
        ("b", ""),
        ("c", "no: worse than the baseline at 2ep, 4ep"),  # at 1ep it is below the baseline's range: a bound
    ]
    assert search.recipe == ("a", "b") and search.speedup is not None and search.speedup.value == pytest.approx(4.0)
    assert [r.chosen for r in search.rounds] == ["a+b", None] and search.rounds[1].tried == []
    assert search.fresh is not None and search.fresh.n == 2  # judged without seed 0, which screened it
    assert (
        not search.to_run
        and (
            "**a+b**, judged on the seeds that did not screen it: 4.00x [4.00, 4.00] n=2 (every seed, the screening "
            "seed 0 "
            "included: 4.00x [4.00, 4.00] n=3) in FLOPs: it qualifies"
        )
        in search.markdown()
    )


def test_the_search_stops_when_no_candidate_improves() -> None:
    section = _section(_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]), _curve("b+a", BASE))
    search = greedy_search(section, "flops")
    assert search.recipe == ("a",) and search.rounds[0].chosen is None
    assert "no candidate improves on it" in search.markdown()


def test_candidates_not_run_yet_are_named_with_the_grid_command_that_runs_them() -> None:
    search = greedy_search(_section(_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75])), "flops")
    assert search.recipe == ("a",) and search.to_run == ["a+b"]
    assert search.command() == (
        "cadence-bench grid study --arms baseline --combination a+b --seeds 1 --data-dir ../shared/data"
    )
    assert "waiting for the candidates not run yet" in search.markdown()
    assert "once these run on seed 0 (screening)" in search.markdown()


def test_a_round_is_screened_on_seed_0_and_its_leader_confirmed_on_every_seed() -> None:
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]), _curve("c", [0.55, 0.65, 0.75]))
    lucky = _curve("a+b", [0.70, 0.75, 0.80], seeds=(0,))  # 4x on seed 0
    steady = _curve("a+c", [0.65, 0.72, 0.80], seeds=(0,))  # less on seed 0
    search = greedy_search(_section(*singles, lucky, steady), "flops")
    assert search.recipe == ("a",) and search.rounds[0].confirming == "a+b" and search.to_run == ["a+b"]
    assert search.command().endswith("--combination a+b --seeds 3 --data-dir ../shared/data")
    assert "a+b leads on seed 0" in search.markdown() and "once these run on all 3 seeds" in search.markdown()
    # on every seed a+b is no better than a alone (it was lucky on seed 0): a+c, the next, is confirmed in turn
    confirmed_lucky = _curve("a+b", [0.60, 0.70, 0.75])
    search = greedy_search(_section(*singles, confirmed_lucky, steady), "flops")
    assert search.rounds[0].confirming == "a+c" and search.to_run == ["a+c"]
    # once a+c has run every seed and still leads, it joins the recipe
    search = greedy_search(_section(*singles, confirmed_lucky, _curve("a+c", [0.65, 0.72, 0.80])), "flops")
    assert search.rounds[0].chosen == "a+c" and search.recipe == ("a", "c") and search.speedup is not None
    assert search.speedup.n == 3 and search.to_run == ["a+c+b"] and not search.confirming


def test_a_candidate_screened_under_another_spelling_is_confirmed_under_that_spelling() -> None:
    """The FLOPs search may screen b+a while the time search, growing from b, asks for a+b: the same methods.
    The leader is confirmed as it was screened, and of two spellings the curve on more seeds counts, or
    the confirmation would run again under the other name and never be seen."""
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    screened = _curve("b+a", [0.70, 0.75, 0.80], seeds=(0,))
    search = greedy_search(_section(*singles, screened), "flops")
    assert search.rounds[0].confirming == "b+a" and search.to_run == ["b+a"] and search.confirming
    confirmed = greedy_search(_section(*singles, screened, _curve("a+b", [0.70, 0.75, 0.80])), "flops")
    assert confirmed.rounds[0].chosen == "a+b" and confirmed.speedup is not None and confirmed.speedup.n == 3
    both_orders = greedy_search(_section(*singles, _curve("a+b", [0.70, 0.75, 0.80]), screened), "flops")
    assert both_orders.rounds[0].chosen == "a+b"  # whichever comes first in the section


def test_with_the_baselines_cyclic_curve_a_candidate_is_screened_by_one_cyclic_run_and_confirmed_by_the_sweep() -> None:
    """Portes et al.: one cyclic run gives a whole curve for the cost of its longest budget. A screen is read
    against the baseline's cyclic curve (like for like), and a recipe only ever by the sweep on every seed."""
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    cyclic_base = _curve("baseline", [0.55, 0.65, 0.75], cyclic=True)  # above the sweep: its best is 0.75
    search = greedy_search(_section(*singles, cyclic_base), "flops")
    assert search.screen == "cyclic" and search.to_run == ["a+b"] and not search.confirming
    assert search.command().endswith("--combination a+b --seeds 1 --curve cyclic --data-dir ../shared/data")
    assert "once these run on seed 0 (screening), one cyclic run each" in search.markdown()
    # 0.75 halfway from cost 1 to 2 in log cost against the cyclic baseline's 4: 2.83x, more than a's 2x
    # (against the sweep's best, 0.70, it would be above it from its shortest budget on)
    screened = _curve("a+b", [0.70, 0.80, 0.85], seeds=(0,), cyclic=True)
    search = greedy_search(_section(*singles, cyclic_base, screened), "flops")
    tried = dict(search.rounds[0].tried)["a+b"]
    assert tried is not None and tried.value == pytest.approx(2 * 2**0.5) and tried.cyclic
    assert tried.format() == "2.83x (1 seed: no interval), cyclic screen"
    assert search.rounds[0].confirming == "a+b" and search.confirming  # by the sweep, on all 3 seeds
    assert search.command().endswith("--combination a+b --seeds 3 --data-dir ../shared/data")
    # a cyclic screen on every seed is still only a screen: the sweep decides
    everywhere = _curve("a+b", [0.70, 0.80, 0.85], cyclic=True)
    assert greedy_search(_section(*singles, cyclic_base, everywhere), "flops").rounds[0].confirming == "a+b"
    swept = _curve("a+b", [0.70, 0.75, 0.80])  # 4x on every seed, against the sweep
    search = greedy_search(_section(*singles, cyclic_base, screened, swept), "flops")
    assert search.rounds[0].chosen == "a+b" and search.speedup is not None and not search.speedup.cyclic
    assert search.speedup.value == pytest.approx(4.0) and search.speedup.n == 3


def test_without_the_baselines_cyclic_curve_candidates_are_screened_by_the_sweep() -> None:
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    cyclic_screen = _curve("a+b", [0.65, 0.75, 0.80], seeds=(0,), cyclic=True)  # nothing to read it against
    search = greedy_search(_section(*singles, cyclic_screen), "flops")
    assert search.screen == "sweep" and search.to_run == ["a+b"] and "--curve" not in search.command()


def test_a_candidate_that_follows_the_runs_length_is_screened_by_its_sweep_not_a_cyclic_run() -> None:
    """Progressive resizing picks its sizes by the elapsed fraction of the run, so the early cycles of a cyclic
    run never see its runs of those budgets: a recorded cyclic screen of it is set aside (this one would have
    led), the grid is asked for its sweep on seed 0, and that sweep is then read like any other screen."""
    singles = (_curve("blurpool", [0.60, 0.70, 0.75]), _curve("progressive_resizing", [0.55, 0.65, 0.75]))
    run_length = RecordedEffects.of([_declared("progressive_resizing", FOLLOWS_LENGTH)]).run_length
    cyclic_base = _curve("baseline", [0.55, 0.65, 0.75], cyclic=True)
    misleading = _curve("blurpool+progressive_resizing", [0.75, 0.80, 0.85], seeds=(0,), cyclic=True)
    search = greedy_search(_section(*singles, cyclic_base, misleading), "flops", run_length=run_length)
    assert search.to_run == ["blurpool+progressive_resizing"] and search.rounds[0].confirming is None
    assert search.set_aside == ["blurpool+progressive_resizing"]
    assert search.by_run_length == {"blurpool+progressive_resizing": ["progressive_resizing"]}
    assert search.curve == "sweep" and "--curve" not in search.command()
    assert "on seed 0 (screening), by the sweep (progressive_resizing follows the elapsed fraction" in search.markdown()
    screened = _curve("blurpool+progressive_resizing", [0.70, 0.75, 0.80], seeds=(0,))  # its sweep on seed 0
    search = greedy_search(_section(*singles, cyclic_base, misleading, screened), "flops", run_length=run_length)
    assert search.rounds[0].confirming == "blurpool+progressive_resizing" and search.confirming
    assert "Cyclic screens set aside: blurpool+progressive_resizing (progressive_resizing follows" in search.markdown()
    mixed = greedy_search(
        _section(*singles, _curve("colout", [0.55, 0.65, 0.75]), cyclic_base), "flops", run_length=run_length
    )
    assert set(mixed.to_run) == {"blurpool+progressive_resizing", "blurpool+colout"} and mixed.curve == "cyclic"
    assert "one cyclic run each (blurpool+progressive_resizing: the sweep, progressive_resizing follows" in (
        mixed.markdown()
    )


def test_the_records_say_which_methods_follow_the_runs_length_and_which_cannot_run_together() -> None:
    """Read from what each method declared in its runs (the ``effects.<method>`` params), a variant
    (``name@label``) by its own runs: its arguments may change what it declares. A method whose runs recorded
    nothing follows nothing and conflicts with nothing, whatever is installed."""
    ema = DeclaredMethod("EMA", Effects(reads={Resource.WEIGHTS}, writes={Resource.WEIGHTS}, conflicts={"SWA": "one"}))
    late = dataclasses.replace(ema, effects=dataclasses.replace(ema.effects, reads={Resource.DURATION}))
    swa = DeclaredMethod("SWA", Effects(reads={Resource.WEIGHTS, Resource.DURATION}, writes={Resource.WEIGHTS}))
    records = [
        _declared("blurpool+progressive_resizing@mild", DeclaredMethod("BlurPool", Effects()), FOLLOWS_LENGTH),
        _declared("layer_freezing", DeclaredMethod("LayerFreezing", Effects(reads={Resource.DURATION}))),
        _declared("ema", ema),
        _declared("ema@late", late),
        _declared("swa", swa),
        _declared("sam", SAM),
        _declared("sam@claimed", SAM),
        study_run("colout", "1ep", 0, accuracy=0.5, train_s=1.0),  # logged before runs declared their effects
    ]
    recorded = RecordedEffects.of(records)
    assert recorded.run_length("blurpool+progressive_resizing@mild+layer_freezing") == [
        "progressive_resizing",
        "layer_freezing",
    ]
    assert recorded.run_length("blurpool+colout+ema+not_recorded") == [] and recorded.run_length("baseline") == []
    assert recorded.run_length("ema@late") == ["ema"]
    assert recorded.conflict(("ema", "swa")) == "EMA and SWA cannot be used together. Fix: one"
    assert "only one method may own the optimizer" in (recorded.conflict(("sam", "sam@claimed")) or "")
    assert recorded.conflict(("blurpool", "colout", "not_recorded", "ema")) is None


def test_a_methods_newest_run_says_what_it_declares() -> None:
    old, new = DeclaredMethod("SWA", Effects()), DeclaredMethod("SWA", Effects(reads={Resource.DURATION}))
    newest_follows = RecordedEffects.of([_declared("swa", new, end_time=2), _declared("swa", old, end_time=1)])
    oldest_follows = RecordedEffects.of([_declared("swa", old, end_time=2), _declared("swa", new, end_time=1)])
    assert newest_follows.run_length("swa") == ["swa"] and oldest_follows.run_length("swa") == []


def test_the_searches_of_a_section_keep_apart_the_methods_its_records_say_cannot_run_together() -> None:
    curves = (_curve("sam", [0.60, 0.70, 0.75]), _curve("sam@claimed", [0.55, 0.65, 0.75]))
    apart = section_searches(_section(*curves, records=[_declared("sam", SAM), _declared("sam@claimed", SAM)]))
    flops = apart[0]  # these curves have no times: the search in time finds no recipe
    assert flops.unit == "flops" and flops.recipe == ("sam",) and flops.rounds[0].tried == [] and not flops.to_run
    unknown = section_searches(_section(*curves))  # no declarations recorded: the combination is a candidate
    assert unknown[0].to_run == ["sam+sam@claimed"]


def test_methods_that_cannot_run_together_are_not_candidates() -> None:
    section = _section(_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    search = greedy_search(
        section, "flops", conflict=lambda methods: "a owns the loss" if set(methods) == {"a", "b"} else None
    )
    assert search.recipe == ("a",) and not search.to_run and search.rounds[0].tried == []


def test_without_a_baseline_or_an_eligible_method_there_is_no_recipe() -> None:
    empty = Section("study", "fam", "study", [], [], [_curve("a", [0.6, 0.7, 0.75])])
    assert greedy_search(empty, "flops").recipe == ()
    worse = greedy_search(_section(_curve("c", [0.40, 0.50, 0.60])), "flops")
    assert worse.recipe == () and "No method is eligible alone" in worse.markdown()


def test_a_candidate_that_never_reaches_the_target_is_not_chosen_even_with_a_higher_bound() -> None:
    """Bounds are upper bounds ("< 1.3x"): a larger one says nothing about being faster. Seed noise keeps
    the singles within noise (eligible) although their means stay below the baseline's best."""
    short = _curve("a", [0.58, 0.66, 0.68], jitter=0.08)  # never reaches 0.70: the recipe starts from its bound
    weaker = _curve("b", [0.52, 0.62, 0.67], jitter=0.08)
    cheaper = [0.9, 1.8, 3.6]  # closer, still below 0.70, for less: a bound of 4 / 3.6
    candidate = _curve("a+b", [0.60, 0.68, 0.69], costs=cheaper, jitter=0.08)
    search = greedy_search(_section(short, weaker, candidate), "flops")
    assert [why for _, _, why in search.singles] == ["", ""]
    assert search.recipe == ("a",) and search.speedup is not None and search.speedup.value is None
    tried = dict(search.rounds[0].tried)["a+b"]
    assert tried is not None and tried.value is None and tried.bound > search.speedup.bound  # a higher bound
    assert search.rounds[0].chosen is None and search.rounds[0].confirming is None and not search.to_run
    assert "no candidate improves on it" in search.markdown()


def test_the_index_runs_the_search_on_every_run_of_the_study_screened_ones_included(
    tmp_path: Path, study_logger: Any, run_logger: Any
) -> None:
    """The cards show arms with 3 seeds only; the INDEX's search must still see the candidates it screened
    on seed 0, or it would ask for them again forever."""
    from cadence_harness.reading.cards import write_index
    from cadence_harness.running.plan import expand
    from cadence_harness.running.recipe import Recipe
    from cadence_harness.store_report import build_report

    study = Recipe(
        name="screened",
        model="tv/resnet20",
        data="digits",
        duration="4ep",
        durations=("1ep", "2ep", "4ep"),
        schedule={"name": "cosine"},
        seeds=(0, 1, 2),
        methods={"sharp": {}, "flat": {}},
        grid={"arms": ["baseline", "each"]},
    )
    base = {"1ep": (0.60, 10.0), "2ep": (0.70, 20.0), "4ep": (0.75, 40.0)}
    sharp = {"1ep": (0.70, 10.0), "2ep": (0.76, 20.0), "4ep": (0.78, 40.0)}  # reaches 0.75 at about 1.6ep
    known = {
        (arm, b): v for arm, table in (("baseline", base), ("flat", base), ("sharp", sharp)) for b, v in table.items()
    }
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study_logger(uri, study, known)
    added = dataclasses.replace(study, grid={"arms": ["baseline"], "combinations": [["sharp", "flat"]]})
    for spec in expand(added):
        if spec.arm_name == "sharp+flat" and spec.seed == 0:  # screened: seed 0 only
            run_logger(uri, spec, 0.80, {"1ep": 10.0, "2ep": 20.0, "4ep": 40.0}[spec.recipe.duration])
    report = build_report(["screened"], tracking_uri=uri, out_dir=tmp_path / "report", plots=False)
    (tmp_path / "methods").mkdir()
    index = write_index(
        report.summaries, methods_root=tmp_path / "methods", index_path=tmp_path / "INDEX.md", sections=report.sections
    ).read_text()
    assert "sharp+flat | 1 |" not in index  # its table rows need 3 seeds
    # 80% from its shortest budget on: at least the baseline's cost to 75% over its shortest budget's
    assert "Round 1, from sharp: sharp+flat: >= 4.00x (above 75.0% already at its shortest budget) (1 seed" in index
    assert "sharp+flat: not run yet" not in index
    assert "sharp+flat leads on seed 0; it joins the recipe if it still does on all seeds" in index


def test_a_curve_above_the_target_from_its_shortest_budget_gives_a_lower_bound_that_can_qualify() -> None:
    above = speedup_at_baseline_best(_curve("a", [0.72, 0.76, 0.80]), _curve("baseline", BASE), "flops")
    assert above is not None and above.value is None and above.at_least == pytest.approx(4.0)
    assert above.estimate == pytest.approx(4.0) and above.low == pytest.approx(4.0) and above.qualifies()
    assert above.format() == ">= 4.00x (above 70.0% already at its shortest budget) [4.00, unbounded] n=3"


def test_a_method_that_saves_cost_per_step_but_ends_below_the_target_is_given_a_cost_matched_budget() -> None:
    """`half` costs half the baseline's FLOPs per step and ends at 0.65 < 0.70: at 4ep it spent 2, the baseline
    needs 4 to reach its best, so it needs a run at 8ep (twice its longest). `same` costs the same per step and
    also ends below: a longer run would cost more than the baseline's, so nothing is asked of it."""
    section = _section(
        _curve("half", [0.45, 0.55, 0.65], costs=[0.5, 1.0, 2.0]),
        _curve("same", [0.45, 0.55, 0.65]),
    )
    search = greedy_search(section, "flops")
    assert search.longer == {"half": "8ep"}
    text = search.markdown()
    assert "Cost-matched runs needed" in text and "(half at 8ep)" in text
    assert "`cadence-bench grid study --arms each --methods half --seeds 3 " in text
    assert """--set 'durations=["1ep", "2ep", "4ep", "8ep"]'""" in text


def test_composers_mild_set_is_read_beside_the_search() -> None:
    mild = "blurpool+ema+label_smoothing@mild+progressive_resizing"  # a variant keeps it Mild
    with_mild = greedy_search(_section(_curve("a", [0.60, 0.70, 0.75]), _curve(mild, [0.60, 0.70, 0.75])), "flops")
    assert with_mild.mild is not None and with_mild.mild[0] == mild
    assert f"Composer's Mild set (`cadence_harness.reading.mild`), beside the search: `{mild}`, 2.00x" in (
        with_mild.markdown()
    )
    other = greedy_search(_section(_curve("blurpool+ema", [0.60, 0.70, 0.75])), "flops")  # no progressive resizing
    assert other.mild is None and "beside the search: not run here." in other.markdown()


def test_composers_mild_set_that_saves_flops_per_step_is_given_a_cost_matched_budget_too() -> None:
    """Mild at half the FLOPs per step ends just below the baseline's best: it needs the baseline's cost, and the
    command runs the Mild arm alone at the longer budget (no other arm, no other combination)."""
    mild = "blurpool+ema+progressive_resizing"
    search = greedy_search(_section(_curve(mild, [0.45, 0.55, 0.65], costs=[0.5, 1.0, 2.0])), "flops")
    assert search.longer == {mild: "8ep"}
    text = search.markdown()
    assert f"--set 'grid.arms=[]' --set 'grid.combinations=[]' --combination {mild} --seeds 3 " in text
    assert "--arms each" not in text


def test_an_identity_arm_is_neither_a_candidate_nor_asked_for_longer_runs() -> None:
    """Scale Schedule at 0.5 repeats the baseline's runs: its curve is the baseline's, relabelled, so it can give
    no speedup and never needs a cost-matched run, though its FLOPs per budget are half the baseline's."""
    section = _section(_curve("half", [0.45, 0.55, 0.65], costs=[0.5, 1.0, 2.0]))
    section.noise_floor = NoiseFloor(("half",), (("2ep", 0, 1.0), ("4ep", 0, 1.0)))
    search = greedy_search(section, "flops")
    assert search.singles[0][2] == "no: it repeats the baseline's runs (the timing null)"
    assert not search.longer and not search.recipe


def _seeds(arm: str, rows: dict[int, list[float]], costs: list[float] = COSTS) -> Curve:
    """A sweep curve with one accuracy row per seed."""
    seeds = sorted(rows)
    acc = np.array([rows[s] for s in seeds])
    cost = np.array([costs for _ in seeds])
    return Curve(arm, f"h-{arm}", "h-baseline", "fam", False, ["1ep", "2ep", "4ep"], seeds, acc, {"flops": cost})


def test_a_recipe_whose_fresh_seeds_cannot_decide_is_undecided_and_more_seeds_are_named() -> None:
    """a+b leads on every seed (2.3x), and on the two seeds that did not screen it its mean speedup is 1.7x, but
    with n=2 the interval spans 1: the data cannot say it fails to qualify, only that more seeds decide it."""
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    recipe = _seeds("a+b", {0: [0.75, 0.80, 0.85], 1: [0.62, 0.72, 0.80], 2: [0.52, 0.64, 0.72]})
    search = greedy_search(_section(*singles, recipe), "flops")
    assert search.recipe == ("a", "b") and search.fresh is not None and search.fresh.n == 2
    assert search.fresh.estimate is not None and search.fresh.estimate >= 1.5 and search.fresh.low < 1
    text = search.markdown()
    assert f"in FLOPs: undecided: {search.fresh.estimate:.2f}x, but with n=2 its interval does not exclude 1" in text
    assert "does not qualify" not in text
    assert (
        "More seeds decide it: the baseline on 5 seeds (`cadence-bench grid study --arms baseline --set "
        "'grid.combinations=[]' --seeds 5 --data-dir ../shared/data`), then `cadence-bench grid study --search` "
        "confirms each round's leader on them."
    ) in text


def test_a_recipe_below_1_5x_does_not_qualify_and_asks_for_nothing() -> None:
    singles = (_curve("a", [0.55, 0.65, 0.75]), _curve("b", [0.55, 0.65, 0.75]))  # 1.41x each
    search = greedy_search(_section(*singles, _curve("a+b", [0.555, 0.655, 0.755])), "flops")  # 1.46x
    assert search.recipe == ("a", "b") and search.fresh is not None and search.fresh.estimate < 1.5
    assert "in FLOPs: it does not qualify" in search.markdown() and "More seeds" not in search.markdown()


def test_a_recipe_that_saves_flops_but_ends_below_the_target_on_its_fresh_seeds_gets_a_cost_matched_run() -> None:
    """The recipe costs half the baseline's FLOPs per step; seed 0 (which screened it) reaches the target, the
    other two end just below it, so it is not judged until a run spends what the baseline needs: 8ep, twice its
    longest; a single method's cost-matched run stays named beside it."""
    half = [0.5, 1.0, 2.0]
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("c", [0.45, 0.55, 0.65], costs=half))
    recipe = _seeds("a+c", {0: [0.72, 0.80, 0.85], 1: [0.55, 0.62, 0.68], 2: [0.55, 0.63, 0.69]}, costs=half)
    search = greedy_search(_section(*singles, recipe), "flops")
    assert search.recipe == ("a", "c") and search.fresh is not None and search.fresh.estimate is None
    assert search.longer == {"c": "8ep", "a+c": "8ep"}
    text = search.markdown()
    assert "in FLOPs: undecided: its curve does not reach the baseline's best accuracy" in text
    assert "--set 'grid.arms=[]' --set 'grid.combinations=[]' --combination a+c --seeds 3 " in text
    assert "--arms each --methods c --seeds 3 " in text


def test_an_interrupted_screen_is_run_on_not_read_as_a_curve_that_ends_early() -> None:
    """A screening grid runs every candidate's shortest budget first; interrupted after it, a candidate's
    seed-0 curve holds 1ep only and would read "does not reach" and end the round. It is not run yet instead."""
    singles = (_curve("a", [0.60, 0.70, 0.75]), _curve("b", [0.55, 0.65, 0.75]))
    partial = Curve(
        "a+b", "h-a+b", "h-baseline", "fam", False, ["1ep"], [0], np.array([[0.62]]), {"flops": np.array([[1.0]])}
    )
    search = greedy_search(_section(*singles, partial), "flops")
    assert search.to_run == ["a+b"] and dict(search.rounds[0].tried)["a+b"] is None
    assert "no candidate improves on it" not in search.markdown()
    finished = greedy_search(_section(*singles, _curve("a+b", [0.62, 0.66, 0.69], seeds=(0,))), "flops")
    assert not finished.to_run and "no candidate improves on it" in finished.markdown()


def _runs(arm: str, accuracy: list[float], seeds: range, budgets: tuple[str, ...] = ("1ep", "2ep", "4ep")) -> list:
    """`arm`'s recorded runs at `budgets` (accuracy by budget, the same on every seed) for `seeds`."""
    from cadence_harness.records import budget_value
    from cadence_harness.testing import study_run

    return [
        study_run(arm, b, s, accuracy=a, train_s=10 * budget_value(b)) for s in seeds for b, a in zip(budgets, accuracy)
    ]


def _search_of(records: list) -> Any:
    from cadence_harness.reading.summaries import sections_of

    (section,) = sections_of(records)
    return greedy_search(section, "flops")


SINGLES = [*_runs("baseline", BASE, range(3)), *_runs("a", [0.58, 0.66, 0.75], range(3))]
SINGLES += _runs("b", [0.55, 0.65, 0.75], range(3))  # a: 1.47x, b: 1.41x at 70%


def test_a_confirmation_cut_off_during_its_longest_budget_is_still_confirmed_not_read_as_a_shorter_curve() -> None:
    """The confirming grid runs the leader a+b (screened on seed 0: 1.91x) at 1ep on seeds 1 and 2, then 2ep, then
    4ep, and stops after seed 1's 4ep. Over the two budgets every seed has, a+b would end at 69%, "not reach" 70%
    and close the round; it is read on seeds 0 and 1, which ran all three, so the grid that finishes it is named."""
    leader = [0.64, 0.69, 0.85]
    stopped = [*SINGLES, *_runs("a+b", leader, range(1)), *_runs("a+b", leader[:2], range(1, 3))]
    stopped += _runs("a+b", leader[2:], range(1, 2), budgets=("4ep",))
    search = _search_of(stopped)
    assert search.recipe == ("a",) and search.rounds[0].confirming == "a+b" and search.confirming
    assert search.command().endswith("--combination a+b --seeds 3 --data-dir ../shared/data")
    assert "no candidate improves on it" not in search.markdown()
    finished = _search_of([*stopped, *_runs("a+b", leader[2:], range(2, 3), budgets=("4ep",))])
    assert finished.recipe == ("a", "b") and finished.speedup is not None and finished.speedup.n == 3


def test_a_baseline_whose_extra_seeds_stopped_early_is_read_on_the_seeds_that_ran_all_its_budgets() -> None:
    """Seeds 3 and 4 of the baseline ran 1ep and 2ep only: read over those two budgets on five seeds, its best
    accuracy (the target) would be 2ep's 60%, not 4ep's 70%."""
    search = _search_of([*SINGLES, *_runs("baseline", BASE[:2], range(3, 5))])
    assert search.seeds == 3 and search.budgets == ["1ep", "2ep", "4ep"]
    assert search.speedup is not None and search.speedup.target == pytest.approx(0.70)
    assert "The baseline is read on the 3 seeds that ran all its budgets (4ep on 3 of its 5 seeds so far)." in (
        search.markdown()
    )


def test_the_gain_of_a_join_is_the_ratio_of_the_two_speedups_paired_by_seed() -> None:
    base, recipe = _curve("baseline", BASE), _curve("a", [0.60, 0.70, 0.75])  # 2x
    joined = _curve("a+b", [0.65, 0.75, 0.80])  # 0.70 halfway from cost 1 to 2 in log cost: 4 / sqrt(2) = 2.83x
    gain = gain_over(joined, recipe, base, "flops")
    assert gain is not None and gain.n == 3 and gain.value == pytest.approx(2**0.5)
    assert gain.low == pytest.approx(2**0.5) and gain.high == pytest.approx(2**0.5)
    assert gain_over(joined, recipe, base, "flops", skip_seed=0).n == 2  # type: ignore[union-attr]
    assert gain_over(joined, recipe, base, "flops", skip_seed=0, confidence=0.5) is not None
    assert gain_over(_curve("a+b", [0.65, 0.75, 0.80], seeds=(0, 5)), recipe, base, "flops", skip_seed=0) is None


@pytest.mark.parametrize(
    ("accuracy", "jitter", "shown"),
    [
        ([0.65, 0.75, 0.80], 0.005, "a measurable gain)"),
        ([0.61, 0.71, 0.76], 0.03, "its interval includes 1, so it joined by its point estimate)"),
    ],
)
def test_each_join_shows_its_gain_over_the_recipe_and_whether_it_is_measurable(
    accuracy: list[float], jitter: float, shown: str
) -> None:
    seeds = (0, 1, 2, 3, 4)
    section = _section(
        _curve("a", [0.60, 0.70, 0.75], seeds=seeds),
        _curve("b", [0.55, 0.65, 0.75], seeds=seeds),
        _curve("a+b", accuracy, jitter=jitter, seeds=seeds),  # its gain over a: seed by seed, `jitter` apart
    )
    section.curves[0] = _curve("baseline", BASE, seeds=seeds)
    search = greedy_search(section, "flops")
    gain = search.rounds[0].gain
    assert search.recipe == ("a", "b") and gain is not None and gain.n == 4 and gain.value > 1
    assert gain.low is not None and (gain.low > 1) == (jitter < 0.01)
    assert f"chose a+b ({gain.format()} over a, without the screening seed: {shown}" in search.markdown()


def test_a_cost_matched_budget_is_asked_only_of_a_curve_that_saves_flops_yet_never_got_the_baselines_cost() -> None:
    assert cost_matched_budget("16ep", flops=0.5, base_flops=1.0, bound=1.9) == "31ep"  # 16 * 1.9 = 30.4, up
    assert cost_matched_budget("300ba", flops=0.5, base_flops=1.0, bound=1.5) == "450ba"
    assert cost_matched_budget("16ep", flops=0.96, base_flops=1.0, bound=1.9) is None  # no saving per step
    assert cost_matched_budget("16ep", flops=0.5, base_flops=1.0, bound=0.9) is None  # it had the baseline's cost
    assert cost_matched_budget("16ep", flops=0.5, base_flops=1.0, bound=None) is None  # it reaches the target


def test_a_recipe_below_1_5x_whose_interval_reaches_1_5x_is_undecided_not_refused() -> None:
    """1.41x [1.25, 1.58] on 4 seeds (the ResNet-20 study's best recipe) read "it does not qualify", a refutation its
    interval cannot support; only an interval wholly below 1.5x says no."""
    reaches = TargetSpeedup("a+b", "flops", 4, 0.9, 1.41, 1.25, 1.58)
    assert reaches.verdict() == "undecided: 1.41x, below 1.5x, but with n=4 its interval does not exclude 1.5x"
    assert TargetSpeedup("a+b", "flops", 4, 0.9, 1.41, 1.25, 1.45).verdict() == "it does not qualify"
    assert TargetSpeedup("a+b", "flops", 1, 0.9, 1.41).verdict().startswith("undecided")  # one seed: no interval
