"""Training budgets: a recipe's ``durations`` sweep, and the ``cyclic`` curve that reads it from one run.

A tradeoff curve (accuracy against cost) needs runs of several lengths, each with its learning
rate schedule fitted to its own length (MosaicML's methodology; Kaddour et al. 2023 show that a
baseline whose schedule is not fully decayed at each budget makes methods look better than they
are). With ``durations = ["2ep", "4ep", "8ep", "16ep"]`` every arm runs once per budget and seed,
and every schedule time must be a fraction of the run (``"1dur"``, ``"0.1dur"``), so each
budget's schedule ends where its run ends. A constant schedule is refused: it never decays.

``curve = "cyclic"`` (Portes et al. 2022, *Fast Benchmarking of Accuracy vs. Training Time with
Cyclic Learning Rates*) instead trains each arm once per seed up to the longest budget, with a
multiplicative cyclic schedule whose cycles end at the budgets: within each cycle the recipe's own
schedule, fitted to the cycle, decays the learning rate to its end, and the evaluation at each
cycle's end is one point of the curve. The warm-up (a fraction of the run) happens in the first
cycle only, so the first cycle is exactly the shortest budget's run; later cycles restart at the
peak rate. The baseline also runs the sweep, so the report can say how far the cyclic curve is
from the standard one. Methods whose behaviour follows the elapsed fraction of training
(progressive resizing, selective backprop, layer freezing, SWA, ...: those whose ``effects()`` read
`Resource.DURATION`) would see the whole cyclic run, not each cycle: progressive resizing with a delay
of half the run would train the 2, 4 and 8 epoch cycles on small images only. An arm with one of them
therefore runs its sweep, also when the recipe asks for a cyclic curve (`follows_run_length`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from cadence.algorithm import Resource
from cadence.callback import Callback
from cadence.event import Event
from cadence.intervals import parse_interval
from cadence.schedulers import Scheduler
from cadence.time import Time, TimeUnit
from cadence_harness.running.recipe_checks import SCHEDULES

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State
    from cadence_harness.running.recipe import Recipe

__all__ = [
    "CycleEnds",
    "CyclicScheduler",
    "build_schedulers",
    "cycles_of",
    "follows_run_length",
    "leaf_recipes",
]

CYCLE_METRIC = "curve/cycle_end"
_WITHOUT_WARMUP = {"cosine_warmup": "cosine", "linear_warmup": "linear", "multistep_warmup": "multistep"}


def leaf_recipes(recipe: Recipe, arm: tuple[str, ...]) -> list[tuple[str, Recipe]]:
    """The runs one arm makes of `recipe`: (label, a recipe of one budget, ``durations`` emptied) pairs.

    One per budget for a sweep (labelled with the budget); for a cyclic curve one run up to the
    longest budget with ``schedule.cycles`` (labelled ``cyclic``), plus the sweep when the arm is the
    baseline (to check the cyclic curve against), and only the sweep when one of the arm's methods
    follows the run's length (`follows_run_length`). A recipe of one budget is its own run (label ``""``).
    """
    if not recipe.durations:
        return [("", recipe)]
    leaves = []
    if recipe.curve == "cyclic" and not follows_run_length(recipe, arm):
        schedule = {**recipe.schedule, "cycles": list(recipe.durations)}
        leaves.append(("cyclic", _leaf(recipe, recipe.durations[-1], schedule)))
        if arm:
            return leaves
    leaves += [(duration, _leaf(recipe, duration, dict(recipe.schedule))) for duration in recipe.durations]
    return leaves


def follows_run_length(recipe: Recipe, arm: Sequence[str]) -> list[str]:
    """The methods of `arm` whose behaviour follows the elapsed fraction of the run (their ``effects()`` read
    `Resource.DURATION`, with the recipe's arguments): one cyclic run cannot stand for their shorter budgets."""
    return [name for name in arm if Resource.DURATION in recipe.algorithm(name).effects().reads]


def _leaf(recipe: Recipe, duration: str, schedule: dict[str, Any]) -> Recipe:
    leaf = dataclasses.replace(recipe, duration=duration, durations=(), curve="sweep", schedule=schedule)
    leaf._algorithms.update(recipe._algorithms)  # the instances validation built answer for the leaf too
    return leaf


def cycles_of(recipe: Recipe) -> tuple[str, ...]:
    """The cycle ends of a cyclic run's recipe (empty for any other run)."""
    return tuple(recipe.schedule.get("cycles", ()))


# The cyclic schedule ---------------------------------------------------------------------
class _CycleClock:
    """What a cadence scheduler reads of `State`, seen from inside one cycle of `length` batches."""

    def __init__(self, batch: int, length: int):
        self.timestamp = SimpleNamespace(batch=batch)
        self.length = length

    def to_batches(self, time: Time) -> int:
        if time.unit is not TimeUnit.DURATION:
            raise ValueError(f"a cyclic schedule takes its times as fractions of a cycle ('0.1dur'), got {time}")
        return round(time.value * self.length)


class CyclicScheduler(Scheduler):
    """The multiplicative cyclic schedule of Portes et al. (2022): `base` fitted to each cycle in turn.

    Args:
        cycle_ends: where each cycle ends (``["2ep", "4ep", "8ep"]``), increasing.
        name: the recipe's schedule (``cosine_warmup``, ...); its times must be fractions (``dur``),
            read as fractions of each cycle. Its warm-up happens in the first cycle only.
        kwargs: that schedule's arguments.
    """

    def __init__(self, cycle_ends: Sequence[str], name: str = "cosine", **kwargs: Any):
        if not cycle_ends:
            raise ValueError(f"cycle_ends={list(cycle_ends)!r}: give where each cycle ends, e.g. ['2ep', '4ep', '8ep']")
        self.cycle_ends = [Time.from_input(end) for end in cycle_ends]
        first = SCHEDULES[name]
        if first is None:
            raise ValueError("a cyclic schedule needs a decaying schedule, not 'constant'")
        self.first = first(**kwargs)
        later = _WITHOUT_WARMUP.get(name)
        rest = {k: v for k, v in kwargs.items() if k != "t_warmup"}
        self.later = SCHEDULES[later](**rest) if later is not None else self.first  # type: ignore[misc]

    def bounds(self, state: State) -> list[int]:
        """The batch at which each cycle ends."""
        return [state.to_batches(end) for end in self.cycle_ends]

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        batch = state.timestamp.batch
        ends = self.bounds(state)
        index = next((i for i, end in enumerate(ends) if batch < end), len(ends) - 1)  # past the end: the last
        start = ends[index - 1] if index else 0
        clock = _CycleClock(batch - start, max(ends[index] - start, 1))
        return (self.first if index == 0 else self.later)(clock, ssr)  # type: ignore[arg-type]


def build_schedulers(recipe: Recipe) -> list[Scheduler]:
    """The run's learning-rate schedule: the recipe's, or the cyclic one when ``schedule.cycles`` is set."""
    kwargs = {k: v for k, v in recipe.schedule.items() if k not in ("name", "cycles")}
    cycles = cycles_of(recipe)
    if cycles:
        return [CyclicScheduler(cycles, recipe.schedule["name"], **kwargs)]
    cls = SCHEDULES[recipe.schedule["name"]]
    return [] if cls is None else [cls(**kwargs)]


class CycleEnds(Callback):
    """Evaluates at the end of every cycle of a cyclic run and marks it: ``curve/cycle_end`` = its number (1, 2, ...).

    Its `due` is the Trainer's ``eval_interval``: the recipe's interval, plus every cycle end,
    never twice at one batch.
    """

    def __init__(self, cycle_ends: Sequence[str], every: Any = "1ep"):
        self.cycle_ends = [Time.from_input(end) for end in cycle_ends]
        self.every = parse_interval(every, "eval_interval")
        self._last_eval = -1

    def _ends(self, state: State) -> list[int]:
        return [state.to_batches(end) for end in self.cycle_ends]

    def due(self, state: State, event: Event) -> bool:
        batch = state.timestamp.batch
        if batch == self._last_eval:
            return False
        if event is Event.BATCH_END and batch in self._ends(state):
            return True
        return self.every is not None and self.every(state, event)

    def eval_end(self, state: State, logger: Logger) -> None:
        batch = state.timestamp.batch
        self._last_eval = batch
        ends = self._ends(state)
        if batch in ends:
            logger.log_metrics({CYCLE_METRIC: ends.index(batch) + 1})
