"""The best recipe of a study: greedy forward selection over the methods that do not lose on their own.

A recipe is judged by its speedup at the **baseline's best accuracy**, with a paired t-interval over seeds
(`cadence_harness.reading.target_speedup`); it *qualifies* at >= 1.5x with the interval above 1.

The search (`greedy_search`), over the records a study already holds:

1. every single method whose speedup at matched accuracy is *worse* at no budget is *eligible*;
2. the recipe starts as the eligible method with the largest speedup at the baseline's best accuracy;
3. each round tries the recipe plus each other eligible method that can run with it; the best
   candidate replaces the recipe if its point estimate is larger, else the search stops. Each join
   shows its gain over the recipe it extends (`gain_over`: the ratio of the two speedups, paired by
   seed, without the screening seed): where that interval includes 1 the method joined by its point
   estimate only, and may be a passenger; the recipe as a whole is judged against the baseline.

A round is screened on one seed, then confirmed: its candidates first run with seed 0 only (a
round of a dozen candidates on every seed would cost a dozen single-method studies), and the
leader, if it beats the recipe, runs on all the baseline's seeds before it joins the recipe. Its
speed-up is then read again on every seed, so a candidate that led by luck falls back and the next
one is confirmed in turn; a recipe is only ever judged on every seed, with its interval.

Where the study holds its baseline's cyclic curve (one run per seed whose learning rate decays fully at every
budget, Portes et al. 2022), a candidate is screened by one cyclic run on seed 0: a whole curve for the cost of
its longest budget alone. Read against the baseline's cyclic curve of the same seed, it only ranks candidates:
the leader is confirmed by the sweep on every seed. A candidate with a sweep is read from its sweep. A candidate
with a method whose behaviour follows the elapsed fraction of the run (progressive resizing, layer freezing, ...)
is screened by its sweep on seed 0 (the grid runs its sweep where a cyclic curve is asked for), and a cyclic run
of it already recorded is set aside: its cycles did not see that method as runs of their length would.

Which methods follow the run's length, and which cannot run together (they are never candidates together), is
read from what each method declared in its runs, as the records hold it (`RecordedEffects`), never from the
classes installed where the report is read; a method whose runs recorded no declaration counts as following
nothing and as compatible with every other.

A round whose runs are missing stops the search there and names them, with the ``cadence-bench grid`` command
that runs them. A curve whose grid stopped (or still runs) during its longer budgets is read on the seeds that
ran them all (`Curve.over`; the baseline on two seeds or more), not as a shorter curve that ends early. Nothing
is extrapolated: a curve that never reaches the target gives only a bound, and such a candidate is never chosen.
In time, a curve run on another machine than its baseline is not compared; where the baseline ran on one machine,
the search asks for such arms to run again there (``grid --rerun-elsewhere``): the methods alone first, as the
rounds start from them, then a round's candidates, on the seeds they have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cadence_harness.reading.commands import recipe_argument
from cadence_harness.reading.cost_matched import cost_matched_budget, cost_matched_markdown
from cadence_harness.reading.mild import mild_curve
from cadence_harness.reading.recorded_effects import RecordedEffects
from cadence_harness.reading.summaries import Section
from cadence_harness.reading.target_speedup import (
    QUALIFYING_SPEEDUP,
    TargetSpeedup,
    gain_over,
    speedup_at_baseline_best,
)
from cadence_harness.reading.tradeoff import COSTS, TIMED, Curve, other_machine
from cadence_harness.records import TAG, run_length_reason

__all__ = [
    "SEARCH_UNITS",
    "Round",
    "Search",
    "greedy_search",
    "grid_command",
    "section_searches",
]

SCREEN_SEED = 0  # candidates are screened on it; a recipe chosen after a screen is judged without it
SEARCH_UNITS = ("flops", "train_s")  # a recipe is searched for in FLOPs and in training time
ELSEWHERE = "not compared: its times and the baseline's come from different machines"


@dataclass
class Round:
    recipe: tuple[str, ...]
    tried: list[tuple[str, TargetSpeedup | None]]  # candidate arm -> its speedup (None: not run yet)
    chosen: str | None = None
    confirming: str | None = None  # the leader on seed 0, waiting for its runs on every seed
    gain: TargetSpeedup | None = None  # the chosen arm over the recipe, without the screening seed (`gain_over`)


@dataclass
class Search:
    """The search's state over one study section, in one cost unit."""

    study: str
    unit: str
    singles: list[tuple[str, TargetSpeedup | None, str]] = field(default_factory=list)  # method, speedup, why out
    rounds: list[Round] = field(default_factory=list)
    recipe: tuple[str, ...] = ()
    speedup: TargetSpeedup | None = None
    to_run: list[str] = field(default_factory=list)  # combinations the next round needs
    mild: tuple[str, TargetSpeedup | None] | None = None  # Composer's Mild arm and its speedup (`mild`)
    fresh: TargetSpeedup | None = None  # a screened recipe's speedup without the screening seed (`SCREEN_SEED`)
    longer: dict[str, str] = field(default_factory=dict)  # method -> its cost-matched budget (`cost_matched`)
    budgets: list[str] = field(default_factory=list)  # the baseline's
    seeds: int = 1  # the baseline's: a candidate joins the recipe only once it has run all of them
    confirming: bool = False  # `to_run` is a leader to run on every seed, not candidates to screen
    screen: str = "sweep"  # how candidates are screened: "cyclic" where the baseline has a cyclic curve
    elsewhere: set[str] = field(default_factory=set)  # in a time: arms run on another machine than their baseline
    machine: str | None = ""  # in a time: the baseline's machine, where `to_run` must run ("": any; None: none)
    own_elsewhere: list[str] = field(default_factory=list)  # in a time: methods alone run on another machine
    rerun: dict[str, tuple[int, str]] = field(default_factory=dict)  # such a candidate -> (its seeds, its curve)
    # arm -> its methods that follow the run's length, so that no cyclic run screens it (`RecordedEffects`)
    by_run_length: dict[str, list[str]] = field(default_factory=dict)
    set_aside: list[str] = field(default_factory=list)  # recorded cyclic screens of such arms, not read
    baseline_left_out: str = ""  # the baseline's budgets not run on every seed yet, and on how many

    @property
    def curve(self) -> str:
        """How `to_run` runs: a sweep to confirm a leader or to screen only candidates that follow the run's
        length, else as candidates are screened."""
        if self.confirming or all(arm in self.by_run_length for arm in self.to_run):
            return "sweep"
        return self.screen

    def command(self) -> str:
        seeds = self.seeds if self.confirming else 1
        return grid_command(self.study, self.to_run, seeds, self.curve) + " --data-dir ../shared/data"

    def rerun_batches(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """(seeds, curve, arms) of the candidates that must run again on the baseline's machine (`rerun`)."""
        grouped: dict[tuple[int, str], list[str]] = {}
        for arm, key in self.rerun.items():
            grouped.setdefault(key, []).append(arm)
        return [(seeds, curve, tuple(arms)) for (seeds, curve), arms in sorted(grouped.items())]

    def markdown(self) -> str:
        unit = COSTS[self.unit]
        lines = [
            f"The recipe ({unit}): greedy forward selection over the methods that lose at no budget alone, each "
            f"judged by its speedup at the baseline's best accuracy (`cadence_harness.reading.combination_search`). "
            "A speedup reads `1.20x [0.90, 1.60] n=3`: the speedup of the mean curves, its 95% interval over the "
            "seeds, the seeds; an end shown as `unbounded` is open on that side (some seed's curve never reached "
            "that accuracy, or reached it already at its shortest budget).",
            "",
        ]
        lines += ["| method alone | speedup at the baseline's best accuracy | eligible |", "| --- | --- | --- |"]
        lines += [f"| {m} | {self._shown(m, s)} | {why or 'yes'} |" for m, s, why in self.singles]
        if self.own_elsewhere:
            count = len(self.own_elsewhere)
            lines += ["", f"{count} {'method' if count == 1 else 'methods'} alone ran on another machine than the "
                      f"baseline, so this search cannot rank {'it' if count == 1 else 'them'} and its rounds are "
                      f"provisional: on {self.machine}, `cadence-bench grid {self.study} --rerun-elsewhere --data-dir "
                      f"../shared/data` runs the study's runs from elsewhere again there (`cadence-bench grid "
                      f"{self.study} --search` does so first)."]  # fmt: skip
        for number, round_ in enumerate(self.rounds, 1):
            tried = "; ".join(f"{arm}: {self._shown(arm, s, 'not run yet')}" for arm, s in round_.tried)
            waiting = any(speedup is None and arm not in self.elsewhere for arm, speedup in round_.tried)
            again = [arm for arm, _ in round_.tried if arm in self.rerun]
            if round_.chosen:
                outcome = f"chose {round_.chosen}" + _gain_text(round_)
            elif round_.confirming:
                outcome = f"{round_.confirming} leads on seed 0; it joins the recipe if it still does on all seeds"
            elif waiting or again:
                outcome = "waiting for " + " and for ".join(
                    (["the candidates not run yet"] if waiting else [])
                    + ([f"{', '.join(again)} to run again on the baseline's machine"] if again else [])
                )
            else:
                outcome = "no candidate improves on it"

            lines += [
                "",
                f"Round {number}, from {'+'.join(round_.recipe)}: {tried or 'nothing left to add'}. {outcome}.",
            ]
        if self.to_run:
            what = f"on all {self.seeds} seeds" if self.confirming else "on seed 0 (screening)"
            swept = [arm for arm in self.to_run if arm in self.by_run_length and not self.confirming]
            if self.curve == "cyclic":
                what += ", one cyclic run each" + (
                    f" ({', '.join(swept)}: the sweep, {self._why_swept(swept)})" if swept else ""
                )
            elif swept:
                what += f", by the sweep ({self._why_swept(swept)})"
            if self.machine:
                what += f", on {self.machine} (the baseline's machine: times compare only within one)"
            lines += ["", f"The search continues once these run {what}: `{self.command()}`."]
        for seeds, curve, arms in self.rerun_batches():
            command = grid_command(self.study, arms, seeds, curve, rerun_elsewhere=True) + " --data-dir ../shared/data"
            lines += ["", f"The search continues once these run again on {self.machine}: `{command}`."]
        if self.to_run or self.rerun:
            lines[-1] += f" `cadence-bench grid {self.study} --search` runs this round and the ones after it."
        if self.set_aside:
            why = self._why_swept(self.set_aside)
            lines += ["", f"Cyclic screens set aside: {', '.join(sorted(self.set_aside))} ({why})."]
        if self.longer:
            lines += ["", cost_matched_markdown(self.study, self.longer, self.budgets, self.seeds)]
        mild = f"`{self.mild[0]}`, {self._shown(*self.mild)}" if self.mild else "not run here"
        if self.baseline_left_out:
            read = f"The baseline is read on the {self.seeds} seeds that ran all its budgets"
            lines += ["", f"{read} ({self.baseline_left_out} so far)."]
        lines += ["", f"Composer's Mild set (`cadence_harness.reading.mild`), beside the search: {mild}."]
        if self.speedup is not None:
            judged = self.fresh or self.speedup
            fresh = (
                f", judged on the seeds that did not screen it: {self.fresh.format()} (every seed, the screening "
                f"seed {SCREEN_SEED} included: {self.speedup.format()})"
                if self.fresh is not None
                else f", {self.speedup.format()}"
            )
            lines += [
                "",
                f"Best recipe so far: **{'+'.join(self.recipe)}**{fresh} in {unit}: {judged.verdict()} "
                f"(it qualifies at >= {QUALIFYING_SPEEDUP}x with the interval above 1).",
            ]
            if judged.needs_more_seeds():
                more = self.seeds + 2
                lines[-1] += (
                    f" More seeds decide it: the baseline on {more} seeds (`cadence-bench grid {self.study} --arms "
                    f"baseline --set 'grid.combinations=[]' --seeds {more} --data-dir ../shared/data`), then "
                    f"`cadence-bench grid {self.study} --search` confirms each round's leader on them."
                )
        else:
            lines += ["", "No method is eligible alone, so there is no recipe to grow."]
        return "\n".join(lines)

    def _why_swept(self, arms: Sequence[str]) -> str:
        return run_length_reason(sorted({m for arm in arms for m in self.by_run_length.get(arm, [])}))

    def _shown(self, arm: str, speedup: TargetSpeedup | None, missing: str = "—") -> str:
        return speedup.format() if speedup else ELSEWHERE if arm in self.elsewhere else missing


def _gain_text(round_: Round) -> str:
    """How much the chosen arm gained over the recipe it extends, and whether that gain is measurable."""
    gain, recipe = round_.gain, "+".join(round_.recipe)
    if gain is None:
        return f" (its gain over {recipe} cannot be read: fewer than two fresh seeds, or a curve known by a bound only)"
    measurable = gain.low is not None and gain.low > 1
    what = "a measurable gain" if measurable else "its interval includes 1, so it joined by its point estimate"
    return f" ({gain.format()} over {recipe}, without the screening seed: {what})"


def _partial_screen(curve: Curve, against: Curve) -> bool:
    """Whether `curve` is a screen (one seed) cut off before the budgets it is read against (a grid runs every
    arm's 2ep before any 4ep); read as it is, it would end early and "does not reach" the target."""
    return curve.n == 1 and not set(against.budgets) <= set(curve.budgets)


def _needs_longer(search: Search, curve: Curve, base: Curve, speedup: TargetSpeedup | None) -> None:
    """Name the cost-matched budget `curve` needs, if it saves FLOPs per step yet never got the baseline's cost
    (`cost_matched`; read off the mean curves of the seeds `speedup` was judged on)."""
    longest = curve.budgets[-1]
    if speedup is None or longest not in base.budgets or "flops" not in curve.costs or "flops" not in base.costs:
        return
    flops, base_flops = curve.costs["flops"][:, -1].mean(), base.costs["flops"][:, base.budgets.index(longest)].mean()
    if budget := cost_matched_budget(longest, float(flops), float(base_flops), speedup.bound):
        search.longer[curve.arm] = budget


def grid_command(
    study: str, combinations: Sequence[str], seeds: int, curve: str = "sweep", rerun_elsewhere: bool = False
) -> str:
    """The ``cadence-bench grid`` command that runs `combinations` beside the baseline on `seeds` seeds,
    one run per budget (`curve` "sweep") or one cyclic run each ("cyclic"); `rerun_elsewhere`: again where they
    last ran on another machine."""
    combos = " ".join(f"--combination {arm}" for arm in combinations)
    cyclic = " --curve cyclic" if curve == "cyclic" else ""
    again = " --rerun-elsewhere" if rerun_elsewhere else ""
    return f"cadence-bench grid {study} --arms baseline {combos} --seeds {seeds}{cyclic}{again}"


def _by_methods(curves: Sequence[Curve], cyclic: bool = False) -> dict[frozenset[str], Curve]:
    """Each arm's sweep (or `cyclic`) curve by its set of methods. An arm run under two spellings (``a+b``
    and ``b+a``: the same methods, listed in another order, which the grid runs as another
    configuration) counts once, by its curve on the most seeds."""
    found: dict[frozenset[str], Curve] = {}
    for curve in curves:
        methods = frozenset(curve.arm.split("+"))
        if curve.cyclic == cyclic and curve.arm != "baseline" and (methods not in found or curve.n > found[methods].n):
            found[methods] = curve
    return found


def _rank(speedup: TargetSpeedup | None) -> tuple[int, float, float]:
    """Curves that reach the target first (by speedup, or the lower bound of one above it from its shortest
    budget on; then by its interval's low end), then those that never reach it, by their upper bound."""
    if speedup is None:
        return (-1, -math.inf, -math.inf)
    if speedup.estimate is None:
        return (0, speedup.bound if speedup.bound is not None else -math.inf, -math.inf)
    return (1, speedup.estimate, speedup.low if speedup.low is not None else -math.inf)


def greedy_search(
    section: Section,
    unit: str = "train_s",
    conflict: Callable[[tuple[str, ...]], str | None] | None = None,
    run_length: Callable[[str], list[str]] | None = None,
) -> Search:
    """The greedy search over `section`'s curves; `conflict(methods)` names why methods cannot run together,
    `run_length(arm)` the arm's methods that follow the elapsed fraction of the run (no cyclic run screens them)."""
    commands = (record.tags.get(f"{TAG}command", "") for record in section.records)
    search = Search(recipe_argument(commands, section.experiment), unit)
    base = section.sweep_curve("baseline")
    if base is None:
        return search
    if base.whole is not None and base.whole.n >= 2:  # its longer budgets stopped (or still run) on some seeds
        search.baseline_left_out = ", ".join(f"{b} on {n} of its {base.n} seeds" for b, n in base.left_out.items())
        base = base.whole
    search.seeds, search.budgets = base.n, list(base.budgets)
    read = [curve.over(base.budgets) for curve in section.curves]  # a confirmation cut off counts as its seeds
    mild = mild_curve(read)
    search.mild = (mild.arm, speedup_at_baseline_best(mild, base, unit)) if mild else None
    if mild and search.mild:
        _needs_longer(search, mild, base, search.mild[1])
    curves = _by_methods(read)
    cyclic_base = section.cyclic_curve("baseline")
    screens = _by_methods(section.curves, cyclic=True) if cyclic_base is not None else {}
    search.screen = "cyclic" if cyclic_base is not None else "sweep"
    for methods, screen in list(screens.items()):
        if run_length is not None and (follows := run_length(screen.arm)):
            search.by_run_length[screen.arm] = follows
            search.set_aside.append(screen.arm)
            del screens[methods]
    if unit in TIMED:
        search.machine = base.machine
        search.elsewhere = {c.arm for c in section.curves if other_machine(c, (c.cyclic and cyclic_base) or base)}
    rerun_here = unit in TIMED and bool(search.machine)  # a candidate that ran elsewhere runs again there
    eligible: list[tuple[str, TargetSpeedup | None]] = []
    identities = set(section.noise_floor.arms) if section.noise_floor else set()
    for methods, curve in sorted(curves.items(), key=lambda item: item[1].arm):
        if len(methods) != 1:
            continue
        speedup = speedup_at_baseline_best(curve, base, unit)
        worse = [s.budget for s in section.speedups_of(curve, unit) if s.verdict == "worse"]
        why = f"no: worse than the baseline at {', '.join(worse)}" if worse else ""
        if curve.arm in identities:  # Scale Schedule at 0.5: the baseline's own runs under other budgets' names
            why = "no: it repeats the baseline's runs (the timing null)"
        else:
            _needs_longer(search, curve, base, speedup)
        search.singles.append((curve.arm, speedup, why))
        if rerun_here and curve.arm not in identities and other_machine(curve, base):
            search.own_elsewhere.append(curve.arm)  # the rounds start from the methods alone: it runs again first
        if not why:
            eligible.append((curve.arm, speedup))
    eligible.sort(key=lambda item: _rank(item[1]), reverse=True)
    if not eligible or eligible[0][1] is None:
        return search
    search.recipe, search.speedup = (eligible[0][0],), eligible[0][1]
    while True:
        round_ = Round(search.recipe, [])
        missing: list[str] = []
        search.rounds.append(round_)
        for method, _ in eligible:
            if method in search.recipe or (conflict and conflict((*search.recipe, method))):
                continue
            methods = frozenset((*search.recipe, method))
            candidate, against = (curves[methods], base) if methods in curves else (screens.get(methods), cyclic_base)
            arm = candidate.arm if candidate else "+".join((*search.recipe, method))  # a screened arm's own spelling
            if candidate is not None and against is not None and _partial_screen(candidate, against):
                candidate = None  # the grid runs the rest of an interrupted screen (it skips the finished runs)
            if candidate is not None and against is not None and rerun_here and other_machine(candidate, against):
                search.rerun[candidate.arm] = (candidate.n, "cyclic" if candidate.cyclic else "sweep")
            elif candidate is None:
                missing.append(arm)
                if run_length is not None and cyclic_base is not None and (follows := run_length(arm)):
                    search.by_run_length[arm] = follows  # the grid runs its sweep, on seed 0
            speedup_at_best = speedup_at_baseline_best(candidate, against, unit) if candidate and against else None
            round_.tried.append((arm, speedup_at_best))
        if missing or search.rerun:
            search.to_run = missing
            return search
        best = max(round_.tried, key=lambda item: _rank(item[1]), default=None)
        if best is None or best[1] is None or best[1].estimate is None or _rank(best[1]) <= _rank(search.speedup):
            return search  # nothing better, or only a bound: a curve that never reaches the target never joins
        if best[1].n < base.n or best[1].cyclic:  # the leader screened only: confirm it by the sweep on all seeds
            round_.confirming, search.to_run, search.confirming = best[0], [best[0]], True
            return search
        round_.chosen = best[0]
        round_.gain = gain_over(curves[frozenset(best[0].split("+"))], curves[frozenset(search.recipe)], base, unit,
                                skip_seed=SCREEN_SEED)  # fmt: skip
        if len(search.recipe) > 1:  # a superseded recipe needs no cost-matched run (a single method still does)
            search.longer.pop("+".join(search.recipe), None)
        search.recipe, search.speedup = tuple(best[0].split("+")), best[1]
        chosen = curves[frozenset(search.recipe)]
        search.fresh = speedup_at_baseline_best(chosen, base, unit, skip_seed=SCREEN_SEED)
        _needs_longer(search, chosen, base, search.fresh)


def section_searches(section: Section) -> list[Search]:
    """The search over `section` in each of `SEARCH_UNITS`, methods that cannot run together kept apart and
    candidates that follow the run's length screened by their sweep, both as the section's records declare
    them (`RecordedEffects`; a method without a recorded declaration counts as compatible with every other and
    as not following the run's length)."""
    declared = RecordedEffects.of(section.records)
    return [greedy_search(section, unit, declared.conflict, declared.run_length) for unit in SEARCH_UNITS]


def search_markdown(section: Section) -> str:
    """The greedy search over the section's arms, in FLOPs and in time, as Markdown."""
    return "\n\n".join(search.markdown() for search in section_searches(section))
