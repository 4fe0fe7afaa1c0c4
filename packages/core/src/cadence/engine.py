"""`Engine`: runs the matched methods, then the callbacks, on each event.

Dispatch lists are computed once per event (methods filtered by their declared ``events``
and sorted by ``order``), so the per-batch cost of an idle method is one ``match`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from cadence.algorithm import Algorithm
from cadence.callback import Callback
from cadence.event import Event
from cadence.loggers.logger import Logger
from cadence.state import State

__all__ = ["Engine", "MethodConflictError", "MethodError", "check_composition"]


class MethodError(RuntimeError):
    """An exception raised inside a method or callback, re-raised with its name and the event."""

    def __init__(self, owner: str, event: Event, error: BaseException):
        self.owner = owner
        self.event = event
        super().__init__(f"{owner} failed on event {event.value!r}: {type(error).__name__}: {error}")


class MethodConflictError(ValueError):
    """Two methods in the same run would corrupt each other's work."""


def check_composition(algorithms: Sequence[Algorithm]) -> None:
    """Reject a list of methods that cannot run together, before anything trains."""
    for index, algorithm in enumerate(algorithms):
        if isinstance(algorithm, type):
            raise TypeError(
                f"algorithms[{index}] is the class {algorithm.__name__}; pass an instance: {algorithm.__name__}()"
            )
        if not isinstance(algorithm, Algorithm):
            raise TypeError(
                f"algorithms[{index}] is a {type(algorithm).__name__}, not a cadence.Algorithm; "
                "pass Algorithm instances (e.g. MixUp()); callbacks go in callbacks=[...]"
            )
    seen: dict[int, int] = {}
    for index, algorithm in enumerate(algorithms):
        if id(algorithm) in seen:
            raise MethodConflictError(
                f"the same {algorithm.name} instance is listed twice (positions {seen[id(algorithm)]} and {index}); "
                "list each method once"
            )
        seen[id(algorithm)] = index
    for first, second in combinations(algorithms, 2):
        _check_pair(first, second)
    _check_duplicate_classes(algorithms)


def _check_duplicate_classes(algorithms: Sequence[Algorithm]) -> None:
    """Two instances of one class that writes something would apply it twice (MixUp twice mixes twice)."""
    first_seen: dict[type, int] = {}
    for index, algorithm in enumerate(algorithms):
        kind = type(algorithm)
        if kind not in first_seen:
            first_seen[kind] = index
            continue
        writes = algorithm.effects().writes
        if writes and not kind.allow_duplicates:
            touched = ", ".join(sorted(resource.value for resource in writes))
            raise MethodConflictError(
                f"{algorithm.name} is listed twice (positions {first_seen[kind]} and {index}): it changes the "
                f"{touched}, so every batch would get it twice. List it once (with the hyperparameters you want); "
                f"a class meant to run several times sets allow_duplicates = True"
            )


def _check_pair(first: Algorithm, second: Algorithm) -> None:
    effects_a, effects_b = first.effects(), second.effects()
    for a, b, effects in ((first, second, effects_a), (second, first, effects_b)):
        fix = effects.conflicts.get(b.name)
        if fix is not None:
            raise MethodConflictError(f"{a.name} and {b.name} cannot be used together. Fix: {fix}")
    for resource in effects_a.exclusive.keys() & effects_b.exclusive.keys():
        what_a, what_b = effects_a.exclusive[resource], effects_b.exclusive[resource]
        raise MethodConflictError(
            f"{first.name} and {second.name} cannot be used together: {first.name} {what_a} and "
            f"{second.name} {what_b}, and only one method may own the {resource.value}. "
            f"Fix: drop one of them, or configure one of them to leave the {resource.value} alone."
        )


class Engine:
    """Runs methods and callbacks on events.

    ``Engine(state, algorithms=[...])`` also drives a hand-written loop:
    ``engine.run_event("after_dataloader")`` accepts event names as strings.
    """

    def __init__(
        self,
        state: State,
        algorithms: Sequence[Algorithm] | None = None,
        callbacks: Sequence[Callback] | None = None,
        logger: Logger | None = None,
    ):
        self.state = state
        if algorithms is not None:
            state.algorithms = list(algorithms)
        if callbacks is not None:
            state.callbacks = list(callbacks)
        self.logger = logger if logger is not None else Logger(state)
        self._algorithm_plan: dict[Event, list[Algorithm]] = {}
        self._callback_plan: dict[Event, list[Callback]] = {}
        self._plan_key: tuple[int, ...] = ()
        self.refresh()

    # Planning ---------------------------------------------------------------------
    def _refresh_plan(self) -> None:
        # Replanning is cheap but runs ~15 times per batch, so the staleness key is the lists'
        # identities and lengths: assigning or appending is noticed. Replacing an item of the
        # same list in place is not; call `refresh()` after doing that.
        algorithms, callbacks = self.state.algorithms, self.state.callbacks
        key = (id(algorithms), len(algorithms), id(callbacks), len(callbacks))
        if key != self._plan_key:
            self.refresh()

    def refresh(self) -> None:
        """Recompute which method and callback runs on which event, in which order."""
        algorithms, callbacks = self.state.algorithms, self.state.callbacks
        check_composition(algorithms)
        ranked = sorted(algorithms, key=lambda algorithm: algorithm.order)  # stable
        for event in Event:
            candidates = [a for a in ranked if not a.events or event in a.events]
            self._algorithm_plan[event] = candidates[::-1] if event.is_after_event else candidates
            self._callback_plan[event] = [c for c in callbacks if c.handles(event)]
        self._plan_key = (id(algorithms), len(algorithms), id(callbacks), len(callbacks))

    def plan(self, event: Event | str) -> list[Algorithm]:
        """The methods that may run on `event`, in the order they would run."""
        self._refresh_plan()
        return list(self._algorithm_plan[Event(event)])

    def describe(self) -> str:
        """A printable table of which method may run on which event, in order."""
        self._refresh_plan()
        lines = ["event                 methods (in run order) | callbacks"]
        for event in Event:
            methods = [a.name if a.events else f"{a.name}(match decides)" for a in self._algorithm_plan[event]]
            callbacks = [type(c).__name__ for c in self._callback_plan[event]]
            if methods or callbacks:
                lines.append(f"{event.value:<21} {', '.join(methods) or '-'} | {', '.join(callbacks) or '-'}")
        if len(lines) == 1:
            lines.append("(no methods or callbacks)")
        return "\n".join(lines)

    # Running ----------------------------------------------------------------------
    def run_event(self, event: Event | str) -> None:
        """Run the methods matched on `event` (in plan order), then the callbacks that handle it."""
        self.run_algorithms(event)
        self.run_callbacks(event)

    def run_algorithms(self, event: Event | str) -> None:
        """Only the methods' part of `event` (the trainer writes checkpoints between the two parts)."""
        if event.__class__ is not Event:
            event = Event(event)
        self._refresh_plan()
        algorithms = self._algorithm_plan[event]
        if not algorithms:
            return
        state, logger = self.state, self.logger
        for algorithm in algorithms:
            if algorithm.match(event, state):
                try:
                    algorithm.apply(event, state, logger)
                except Exception as error:
                    raise MethodError(algorithm.name, event, error) from error

    def run_callbacks(self, event: Event | str) -> None:
        """Only the callbacks' part of `event`."""
        if event.__class__ is not Event:
            event = Event(event)
        self._refresh_plan()
        state, logger = self.state, self.logger
        for callback in self._callback_plan[event]:
            try:
                callback.run_event(event, state, logger)
            except Exception as error:
                raise MethodError(type(callback).__name__, event, error) from error

    def check_applicable(self, batch: Any) -> None:
        """Ask every method whether it can work on the model with batches like `batch` (before any runs).

        Raises the first method's `NotApplicableError`, whose message names the method and the fix.
        """
        for algorithm in self.state.algorithms:
            algorithm.check_applicable(self.state.model, batch)

    def close(self) -> None:
        """Give every callback the chance to release resources (idempotent)."""
        for callback in self.state.callbacks:
            callback.close(self.state, self.logger)
