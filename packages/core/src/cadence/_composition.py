"""Which methods may run together: checked from their declared effects before anything trains.

`cadence.engine` re-exports `check_composition` and `MethodConflictError`; the Engine runs the check
whenever it plans.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from cadence.algorithm import Algorithm, DuckTypedAlgorithm, as_algorithm, has_algorithm_hooks

__all__ = ["MethodConflictError", "check_composition"]

_log = logging.getLogger("cadence.engine")


class MethodConflictError(ValueError):
    """Two methods in the same run would corrupt each other's work."""


MethodConflictError.__module__ = "cadence.engine"  # where users import it from


def check_composition(algorithms: Sequence[Any]) -> None:
    """Reject a list of methods that cannot run together, before anything trains.

    Each item is an `Algorithm` or, as in Composer, an object with callable ``match`` and ``apply``; the
    latter declare no effects, so they take part in no conflict check (a log note says so).
    """
    for index, algorithm in enumerate(algorithms):
        if isinstance(algorithm, type):
            raise TypeError(
                f"algorithms[{index}] is the class {algorithm.__name__}; pass an instance: {algorithm.__name__}()"
            )
        if not has_algorithm_hooks(algorithm):
            raise TypeError(
                f"algorithms[{index}] is a {type(algorithm).__name__}, not a cadence.Algorithm (nor an object with "
                "match(event, state) and apply(event, state, logger) methods); pass Algorithm instances "
                "(e.g. MixUp()); callbacks go in callbacks=[...]"
            )
    views = [as_algorithm(algorithm) for algorithm in algorithms]
    seen: dict[int, int] = {}
    for index, algorithm in enumerate(algorithms):
        if id(algorithm) in seen:
            raise MethodConflictError(
                f"the same {views[index].name} instance is listed twice (positions {seen[id(algorithm)]} and "
                f"{index}); list each method once"
            )
        seen[id(algorithm)] = index
    declared = [(index, view) for index, view in enumerate(views) if not isinstance(view, DuckTypedAlgorithm)]
    for (_, first), (_, second) in combinations(declared, 2):
        _check_pair(first, second)
    _check_duplicate_classes(declared)
    for index, view in enumerate(views):
        if isinstance(view, DuckTypedAlgorithm):
            _log.info(
                "algorithms[%d] (%s) does not subclass cadence.Algorithm: it declares no effects, so it is checked "
                "against no other method; match is asked on every event and it runs at order 0",
                index,
                view.name,
            )


def _check_duplicate_classes(algorithms: Sequence[tuple[int, Algorithm]]) -> None:
    """Two instances of one class that writes something would apply it twice (MixUp twice mixes twice).
    `algorithms`: (position in the user's list, method)."""
    first_seen: dict[type, int] = {}
    for index, algorithm in algorithms:
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
