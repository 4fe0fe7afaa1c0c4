"""Declared methods: the composition check applied to plain data (a run's logged declarations), with the rules and
messages of `check_composition` on the methods themselves."""

from __future__ import annotations

import json

import pytest

from cadence import Algorithm, Effects, Event, Resource
from cadence.engine import DeclaredMethod, MethodConflictError, check_composition, check_declarations


class _Method(Algorithm):
    events = (Event.BATCH_END,)

    def match(self, event, state):
        return False

    def apply(self, event, state, logger):
        pass


class EMA(_Method):
    def effects(self) -> Effects:
        fix = "use one of them"
        return Effects(reads={Resource.WEIGHTS, Resource.DURATION}, writes={Resource.WEIGHTS}, conflicts={"SWA": fix})


class SWA(_Method):
    def effects(self) -> Effects:
        return Effects(reads={Resource.WEIGHTS}, writes={Resource.WEIGHTS, Resource.SCHEDULE})


class SAM(_Method):
    def effects(self) -> Effects:
        return Effects(reads={Resource.GRADIENTS}, exclusive={Resource.OPTIMIZER: "steps the optimizer twice"})


class InputWriter(_Method):
    def effects(self) -> Effects:
        return Effects(writes={Resource.INPUTS})


class Repeatable(InputWriter):
    allow_duplicates = True


class Observer(_Method):
    pass


def _logged(algorithm: Algorithm) -> DeclaredMethod:
    """`algorithm`'s declaration after a trip through JSON, as a run record keeps it."""
    return DeclaredMethod.from_dict(json.loads(json.dumps(DeclaredMethod.of(algorithm).to_dict())))


def _refusal(check, methods) -> str | None:
    try:
        check(methods)
    except MethodConflictError as error:
        return str(error)
    return None


def test_a_declaration_round_trips_through_json_with_resources_as_their_values() -> None:
    sam = DeclaredMethod.of(SAM())
    assert sam.to_dict() == {
        "name": "SAM",
        "allow_duplicates": False,
        "reads": ["gradients"],
        "writes": ["optimizer"],
        "exclusive": {"optimizer": "steps the optimizer twice"},
        "conflicts": {},
    }
    for algorithm in (EMA(), SWA(), SAM(), InputWriter(), Repeatable(), Observer()):
        assert _logged(algorithm) == DeclaredMethod.of(algorithm)
    assert DeclaredMethod.of(Repeatable()).allow_duplicates and not DeclaredMethod.of(InputWriter()).allow_duplicates


@pytest.mark.parametrize(
    "make",
    [
        lambda: [EMA(), SWA()],
        lambda: [SWA(), EMA()],
        lambda: [SAM(), Observer(), SAM()],
        lambda: [InputWriter(), SAM(), InputWriter()],
        lambda: [Repeatable(), Repeatable()],
        lambda: [Observer(), Observer(), EMA()],
        lambda: [],
    ],
    ids=["ema+swa", "swa+ema", "two-sams", "writer-twice", "opt-in-twice", "observers", "none"],
)
def test_declarations_are_refused_as_the_methods_are_with_the_same_message(make) -> None:
    methods = make()
    assert _refusal(check_declarations, [_logged(m) for m in methods]) == _refusal(check_composition, methods)
    if methods and methods[0].name in ("EMA", "SWA"):
        assert "EMA and SWA cannot be used together. Fix: use one of them" in _refusal(check_composition, methods)


def test_without_classes_two_declarations_of_one_name_are_duplicates() -> None:
    writer = DeclaredMethod("InputWriter", Effects(writes={Resource.INPUTS}))
    with pytest.raises(MethodConflictError, match=r"InputWriter is listed twice \(positions 0 and 1\)"):
        check_declarations([writer, DeclaredMethod("InputWriter", Effects(writes={Resource.INPUTS}))])
    check_declarations([writer, DeclaredMethod("Other", Effects(writes={Resource.INPUTS}))])


def test_a_declaration_from_another_version_or_a_method_that_declares_nothing_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown resources \['colour'\].*another version of cadence"):
        DeclaredMethod.from_dict({"name": "X", "reads": ["colour"]})
    with pytest.raises(ValueError, match="no 'name'"):
        DeclaredMethod.from_dict({"reads": ["loss"]})

    class Duck:
        def match(self, event, state):
            return False

        def apply(self, event, state, logger):
            pass

    with pytest.raises(TypeError, match=r"Duck does not subclass cadence\.Algorithm"):
        DeclaredMethod.of(Duck())  # type: ignore[arg-type]
