"""Time units, time strings, and the number types a `Timestamp` hands out.

Kept apart from `cadence.time` so that `Time` and `Timestamp` read without the parsing details.
Strings follow Composer: ``"10ep"``, ``"2iter"``, ``"4_000tok"``, ``"3e4sp"``, ``"0.5dur"``, ``"6sec"``,
and wall-clock strings ``"1h30m"``, ``"45s"`` (seconds).
"""

from __future__ import annotations

import datetime
import math
import re
from enum import Enum
from typing import Any

__all__ = ["Count", "NotAWholeCountError", "Seconds", "TimeUnit", "as_count", "checked_value", "split_timestring"]
__all__ += ["with_iteration_start"]


class TimeUnit(str, Enum):
    ITERATION = "iter"
    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"
    DURATION = "dur"
    SECOND = "sec"

    @classmethod
    def _missing_(cls, value: object) -> TimeUnit | None:
        """Composer's lookup: ``TimeUnit("EPOCH")``, ``TimeUnit("Ep")`` and the long names match, in any case."""
        return _UNIT_ALIASES.get(value.strip().lower()) if isinstance(value, str) else None

    @classmethod
    def parse(cls, unit: TimeUnit | str) -> TimeUnit:
        if isinstance(unit, TimeUnit):
            return unit
        try:
            return _UNIT_ALIASES[str(unit).strip().lower()]
        except KeyError:
            allowed = ", ".join(sorted(_UNIT_ALIASES))
            raise ValueError(f"unknown time unit {unit!r}; use one of: {allowed}") from None


_UNIT_ALIASES = {
    **{u.value: u for u in TimeUnit},
    **{name: TimeUnit.ITERATION for name in ("iteration", "iterations")},
    **{name: TimeUnit.EPOCH for name in ("epoch", "epochs")},
    **{name: TimeUnit.BATCH for name in ("batch", "batches")},
    **{name: TimeUnit.SAMPLE for name in ("sample", "samples")},
    **{name: TimeUnit.TOKEN for name in ("token", "tokens")},
    **{name: TimeUnit.SECOND for name in ("second", "seconds")},
    "duration": TimeUnit.DURATION,
}

_TIME_STRING = re.compile(r"^\s*([0-9eE.+\-_]+)\s*(iter|ep|ba|sp|tok|dur|sec)\s*$", re.IGNORECASE)
_WALL_CLOCK = re.compile(r"^\s*(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\s*$", re.IGNORECASE)


def split_timestring(text: Any) -> tuple[int | float, TimeUnit]:
    """``"4_000tok"`` -> ``(4000, TimeUnit.TOKEN)``; ``"1h30m"`` -> ``(5400, TimeUnit.SECOND)``.

    Integers are read exactly (``int("4_000")``), everything else as a float, as Composer reads them
    (so ``"3e4sp"`` works); whether the number fits the unit is left to `Time`.
    """
    wall_clock = _WALL_CLOCK.match(text) if isinstance(text, str) else None
    if wall_clock is not None and any(wall_clock.groups()):
        hours, minutes, seconds = (int(part or 0) for part in wall_clock.groups())
        return hours * 3600 + minutes * 60 + seconds, TimeUnit.SECOND
    match = _TIME_STRING.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"cannot parse {text!r} as a time; write a number and a unit, e.g. '10ep', '100ba', '3e4sp', "
            "'4_000tok', '0.5dur', '2iter', '60sec', or a wall-clock time like '1h30m'"
        )
    number, unit = match.groups()
    try:
        value: int | float = int(number)
    except ValueError:
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"cannot parse the number {number!r} in time {text!r}") from None
    return value, TimeUnit.parse(unit)


class NotAWholeCountError(TypeError, ValueError):
    """A fractional count in a unit other than ``dur`` (``"1.5ep"``): Composer's TypeError, cadence's ValueError."""


def checked_value(value: Any, unit: TimeUnit) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Time value must be a number, got {value!r} ({type(value).__name__})")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"Time value must be finite, got {value!r}")
    if unit is TimeUnit.DURATION:
        return float(value)
    if isinstance(value, int):
        return int(value)
    if not value.is_integer():
        raise NotAWholeCountError(
            f"{value}{unit.value}: only 'dur' may be fractional; "
            f"use a whole number of {unit.name.lower()}s or a fraction like '0.5dur'"
        )
    return int(value)


class Count(int):
    """A whole count in one unit, as a `Timestamp` field or ``State.dataloader_len`` holds it.

    An ``int``, so arithmetic, formatting and checkpoints see a plain number; it also reads like
    Composer's ``Time[int]``: ``.value``, ``.unit``, ``.to_timestring()``, and comparing it with a
    `Time` checks the units (``timestamp.batch >= Time(10, 'ba')``).
    """

    unit: TimeUnit

    def __new__(cls, value: int, unit: TimeUnit | str) -> Count:
        count = super().__new__(cls, value)
        count.unit = TimeUnit.parse(unit)
        return count

    def __reduce__(self) -> tuple[Any, ...]:
        return Count, (int(self), self.unit)

    @property
    def value(self) -> int:
        return int(self)

    def to_timestring(self) -> str:
        return f"{int(self)}{self.unit.value}"


def count_unchecked(value: int, unit: TimeUnit) -> Count:
    """``Count(value, unit)`` for an int and a `TimeUnit` known to be right, without parsing the unit
    (the trainer's per-batch timestamp)."""
    count = int.__new__(Count, value)
    count.unit = unit
    return count


class Seconds(float):
    """Wall-clock seconds, as a `Timestamp` holds them: a ``float`` that also answers ``total_seconds()``
    and compares with a ``datetime.timedelta`` (``ts.total_wct == timedelta(seconds=5)``), so code written
    for Composer's ``timedelta`` fields keeps working."""

    def __new__(cls, value: float | datetime.timedelta) -> Seconds:
        if isinstance(value, datetime.timedelta):
            value = value.total_seconds()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"wall-clock time must be seconds or a datetime.timedelta, got {value!r}")
        return super().__new__(cls, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return Seconds, (float(self),)

    def total_seconds(self) -> float:
        return float(self)

    def __eq__(self, other: object) -> bool:
        return float(self) == _seconds(other)

    def __ne__(self, other: object) -> bool:
        return float(self) != _seconds(other)

    def __lt__(self, other: object) -> bool:
        return float(self) < _seconds(other)

    def __le__(self, other: object) -> bool:
        return float(self) <= _seconds(other)

    def __gt__(self, other: object) -> bool:
        return float(self) > _seconds(other)

    def __ge__(self, other: object) -> bool:
        return float(self) >= _seconds(other)

    __hash__ = float.__hash__

    def as_timedelta(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=float(self))


def _seconds(other: object) -> Any:
    """A ``timedelta`` as its seconds, so `Seconds` compares with one; anything else as given."""
    return other.total_seconds() if isinstance(other, datetime.timedelta) else other


def as_count(name: str, value: Any, unit: TimeUnit) -> Count:
    if isinstance(getattr(value, "unit", None), TimeUnit):  # a Time or a Count
        if value.unit is not unit:
            raise ValueError(f"Timestamp {name}={value!r} is in {value.unit.value}; it counts {unit.value}")
        value = int(value.value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Timestamp {name} must be a whole number of {unit.value}, got {value!r}")
    return value if isinstance(value, Count) and value.unit is unit else Count(value, unit)


def with_iteration_start(total_wct: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Composer's ``iteration_wct`` key, read as the ``iteration_start_wct`` cadence stores."""
    if state.get("iteration_wct") is None:
        return {name: value for name, value in state.items() if name != "iteration_wct"}
    state = dict(state)
    recorded = state.get("total_wct")
    total = float(Seconds(recorded if recorded is not None else total_wct))
    state["iteration_start_wct"] = total - float(Seconds(state.pop("iteration_wct")))
    return state


def _allow_in_weights_only_loads() -> None:
    """Timestamp counters are `Count` ints and wall-clock fields `Seconds` floats; a user who saves one with
    ``torch.save`` (``{"step": state.timestamp.batch}``) must be able to load it with ``torch.load``'s
    default ``weights_only=True``, as they could a plain number."""
    import torch.serialization

    add = getattr(torch.serialization, "add_safe_globals", None)  # torch >= 2.4
    if add is not None:
        add([Count, Seconds, TimeUnit])


_allow_in_weights_only_loads()
