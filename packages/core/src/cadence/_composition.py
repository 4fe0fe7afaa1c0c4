"""Which methods may run together: checked from their declared effects before anything trains.

`cadence.engine` re-exports `check_composition`, `check_declarations`, `DeclaredMethod` and `MethodConflictError`;
the Engine runs the check whenever it plans. `DeclaredMethod` is a method as the check sees it, as plain data, so
that the check can also be applied where the methods' classes are not installed (to a run's logged declarations).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from cadence.algorithm import Algorithm, DuckTypedAlgorithm, Effects, Resource, as_algorithm, has_algorithm_hooks

__all__ = ["DeclaredMethod", "MethodConflictError", "check_composition", "check_declarations"]

_log = logging.getLogger("cadence.engine")


class MethodConflictError(ValueError):
    """Two methods in the same run would corrupt each other's work."""


MethodConflictError.__module__ = "cadence.engine"  # where users import it from


@dataclass(frozen=True)
class DeclaredMethod:
    """All that the composition check reads of a method: its name, its effects and whether its class may be
    listed twice. A run can log it (`to_dict`) so that its methods can be checked later without their code."""

    name: str
    effects: Effects
    allow_duplicates: bool = False

    @classmethod
    def of(cls, algorithm: Algorithm) -> DeclaredMethod:
        """What `algorithm` (an instance: its effects may follow its arguments) declares."""
        if not isinstance(algorithm, Algorithm) or isinstance(algorithm, DuckTypedAlgorithm):
            raise TypeError(
                f"{type(algorithm).__name__} does not subclass cadence.Algorithm, so it declares no effects to "
                "check; the composition check leaves such a method out"
            )
        return cls(algorithm.name, algorithm.effects(), bool(type(algorithm).allow_duplicates))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, resources by their values; the ``exclusive`` phrases and ``conflicts`` fixes are kept, so a
        check of the data reads as the check of the methods."""
        effects = self.effects
        return {
            "name": self.name,
            "allow_duplicates": self.allow_duplicates,
            "reads": sorted(resource.value for resource in effects.reads),
            "writes": sorted(resource.value for resource in effects.writes),
            "exclusive": {resource.value: what for resource, what in sorted(effects.exclusive.items())},
            "conflicts": dict(sorted(effects.conflicts.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeclaredMethod:
        """The inverse of `to_dict`; a resource this version of cadence does not know is refused, by name."""
        known = [resource.value for resource in Resource]
        named = [*data.get("reads", ()), *data.get("writes", ()), *data.get("exclusive", {})]
        unknown = sorted({value for value in named if value not in known})
        if unknown or "name" not in data:
            what = f"unknown resources {unknown} (known: {known})" if unknown else "no 'name'"
            raise ValueError(
                f"not a method declaration as DeclaredMethod.to_dict writes it: {what}; it may come from another "
                "version of cadence"
            )
        effects = Effects(
            reads=frozenset(Resource(value) for value in data.get("reads", ())),
            writes=frozenset(Resource(value) for value in data.get("writes", ())),
            exclusive={Resource(value): str(what) for value, what in data.get("exclusive", {}).items()},
            conflicts={str(name): str(fix) for name, fix in data.get("conflicts", {}).items()},
        )
        return cls(str(data["name"]), effects, bool(data.get("allow_duplicates", False)))


def check_composition(algorithms: Sequence[Any]) -> None:
    """Reject a list of methods that cannot run together, before anything trains.

    Each item is an `Algorithm` or, as in Composer, an object with callable ``match`` and ``apply``; the
    latter declare no effects, so they take part in no conflict check (a log note says so). Two instances of
    one class count as duplicates (`check_declarations` applies the same rules to declarations).
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
    _check_rules([(index, type(view), DeclaredMethod.of(view)) for index, view in declared])
    for index, view in enumerate(views):
        if isinstance(view, DuckTypedAlgorithm):
            _log.info(
                "algorithms[%d] (%s) does not subclass cadence.Algorithm: it declares no effects, so it is checked "
                "against no other method; match is asked on every event and it runs at order 0",
                index,
                view.name,
            )


def check_declarations(methods: Sequence[DeclaredMethod]) -> None:
    """Reject declared methods that cannot run together, by the rules of `check_composition` and with its messages.
    Without the classes, two declarations of one name count as duplicates."""
    _check_rules([(index, method.name, method) for index, method in enumerate(methods)])


def _check_rules(methods: Sequence[tuple[int, Hashable, DeclaredMethod]]) -> None:
    """Every pair, then the duplicates. `methods`: (position in the user's list, duplicate key, declaration)."""
    for (_, _, first), (_, _, second) in combinations(methods, 2):
        _check_pair(first, second)
    _check_duplicates(methods)


def _check_duplicates(methods: Sequence[tuple[int, Hashable, DeclaredMethod]]) -> None:
    """Two instances of one class that writes something would apply it twice (MixUp twice mixes twice)."""
    first_seen: dict[Hashable, int] = {}
    for index, key, method in methods:
        if key not in first_seen:
            first_seen[key] = index
            continue
        writes = method.effects.writes
        if writes and not method.allow_duplicates:
            touched = ", ".join(sorted(resource.value for resource in writes))
            raise MethodConflictError(
                f"{method.name} is listed twice (positions {first_seen[key]} and {index}): it changes the "
                f"{touched}, so every batch would get it twice. List it once (with the hyperparameters you want); "
                f"a class meant to run several times sets allow_duplicates = True"
            )


def _check_pair(first: DeclaredMethod, second: DeclaredMethod) -> None:
    effects_a, effects_b = first.effects, second.effects
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
