"""Training time: `Time` (an amount in one unit), `TimeUnit`, and `Timestamp` (where a run is).

Strings follow Composer: ``"10ep"``, ``"100ba"``, ``"3e4sp"``, ``"1e6tok"``, ``"0.5dur"``.
Only ``dur`` (a fraction of the whole run) may be fractional, so ``"1.5ep"`` is refused
rather than silently truncated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, Union

__all__ = ["Time", "TimeLike", "TimeUnit", "Timestamp", "ensure_time", "parse_time"]


class TimeUnit(str, Enum):
    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"
    DURATION = "dur"

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
    "epoch": TimeUnit.EPOCH,
    "epochs": TimeUnit.EPOCH,
    "batch": TimeUnit.BATCH,
    "batches": TimeUnit.BATCH,
    "sample": TimeUnit.SAMPLE,
    "samples": TimeUnit.SAMPLE,
    "token": TimeUnit.TOKEN,
    "tokens": TimeUnit.TOKEN,
    "duration": TimeUnit.DURATION,
}

_TIME_STRING = re.compile(r"^\s*([0-9eE.+\-]+)\s*(ep|ba|sp|tok|dur)\s*$", re.IGNORECASE)

TimeLike = Union["Time", str, int]


class Time:
    """An amount of training time in one unit. Immutable.

    ``Time(10, "ep")``, ``Time(10, "epoch")`` and ``Time.from_timestring("10ep")`` are the same.
    Arithmetic and comparison need equal units (a plain number takes this Time's unit);
    ``time * 0.5`` scales (used by ``scale_schedule_ratio``).
    """

    __slots__ = ("unit", "value")

    def __init__(self, value: int | float, unit: TimeUnit | str):
        unit = TimeUnit.parse(unit)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"Time value must be a number, got {value!r} ({type(value).__name__})")
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"Time value must be finite, got {value!r}")
        if value < 0:
            raise ValueError(f"Time value must be >= 0, got {value!r} {unit.value}")
        if unit is not TimeUnit.DURATION:
            if float(value) != int(value):
                raise ValueError(
                    f"{value}{unit.value}: only 'dur' may be fractional; "
                    f"use a whole number of {unit.name.lower()}s or a fraction like '0.5dur'"
                )
            value = int(value)
        else:
            value = float(value)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "unit", unit)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Time is immutable")

    @classmethod
    def from_timestring(cls, text: str) -> Time:
        match = _TIME_STRING.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(
                f"cannot parse {text!r} as a time; write a number and a unit, "
                "e.g. '10ep', '100ba', '3e4sp', '1e6tok' or '0.5dur'"
            )
        number, unit = match.groups()
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"cannot parse the number {number!r} in time {text!r}") from None
        return cls(value, unit)

    @classmethod
    def from_input(cls, value: TimeLike, default_int_unit: TimeUnit | str = TimeUnit.EPOCH) -> Time:
        """Accept a `Time`, a time string, or an int (taken in `default_int_unit`)."""
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value, default_int_unit)
        raise TypeError(f"expected a Time, a string like '10ep' or an int, got {value!r} ({type(value).__name__})")

    # Arithmetic -----------------------------------------------------------------------
    def _same_unit(self, other: Any, op: str) -> Time:
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Time(other, self.unit)
        if isinstance(other, str):
            other = Time.from_timestring(other)
        if not isinstance(other, Time):
            return NotImplemented
        if other.unit is not self.unit:
            raise ValueError(f"cannot {op} {self} and {other}: units differ; convert one first")
        return other

    def __add__(self, other: Any) -> Time:
        other = self._same_unit(other, "add")
        return other if other is NotImplemented else Time(self.value + other.value, self.unit)

    def __sub__(self, other: Any) -> Time:
        other = self._same_unit(other, "subtract")
        return other if other is NotImplemented else Time(self.value - other.value, self.unit)

    def __mul__(self, factor: Any) -> Time:
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            return NotImplemented
        value = self.value * factor
        return Time(value if self.unit is TimeUnit.DURATION else round(value), self.unit)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> float:
        other = self._same_unit(other, "divide")
        if other is NotImplemented:
            return other
        return self.value / other.value

    def _cmp_value(self, other: Any) -> float:
        other = self._same_unit(other, "compare")
        if other is NotImplemented:
            raise TypeError(f"cannot compare {self} with {other!r}")
        return other.value

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Time):
            return self.unit is other.unit and self.value == other.value
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.value == other
        if isinstance(other, str):
            return self == Time.from_timestring(other)
        return NotImplemented

    def __lt__(self, other: Any) -> bool:
        return self.value < self._cmp_value(other)

    def __le__(self, other: Any) -> bool:
        return self.value <= self._cmp_value(other)

    def __gt__(self, other: Any) -> bool:
        return self.value > self._cmp_value(other)

    def __ge__(self, other: Any) -> bool:
        return self.value >= self._cmp_value(other)

    def __hash__(self) -> int:
        return hash((self.value, self.unit))

    def __repr__(self) -> str:
        return f"Time({self.value!r}, {self.unit.value!r})"

    def __str__(self) -> str:
        return f"{self.value}{self.unit.value}"


def ensure_time(value: TimeLike, default_int_unit: TimeUnit | str = TimeUnit.EPOCH) -> Time:
    return Time.from_input(value, default_int_unit)


def parse_time(
    name: str,
    value: TimeLike,
    *,
    default_int_unit: TimeUnit | str = TimeUnit.EPOCH,
    units: tuple[TimeUnit, ...] | None = None,
    positive: bool = False,
) -> Time:
    """A user's time argument as a `Time`; every refusal names the argument `name` and echoes `value`.

    `units` limits the accepted units; `positive` refuses zero.
    """
    try:
        time = Time.from_input(value, default_int_unit)
    except (TypeError, ValueError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"{name}={value!r} is not a time: {error}") from None
    names = [unit.value for unit in (units or tuple(TimeUnit))]
    amount = f"{'a positive' if positive else 'an'} amount of {', '.join(names[:-1])} or {names[-1]}"
    if (units is not None and time.unit not in units) or (positive and time.value <= 0):
        raise ValueError(f"{name}={value!r} must be {amount}, e.g. '10{names[0]}'")
    return time


@dataclass(frozen=True)
class Timestamp:
    """Where a run is: counters since the start, counters within the epoch, and wall-clock seconds.

    Immutable: the trainer replaces ``state.timestamp`` after every batch and epoch, so a
    method may keep a reference to an old timestamp safely.
    """

    epoch: int = 0
    batch: int = 0
    sample: int = 0
    token: int = 0
    batch_in_epoch: int = 0
    sample_in_epoch: int = 0
    token_in_epoch: int = 0
    total_wct: float = 0.0  # seconds of training (batches), excluding evaluation
    epoch_wct: float = 0.0
    batch_wct: float = 0.0

    def get(self, unit: TimeUnit | str) -> int:
        field = _COUNTERS.get(unit)  # type: ignore[call-overload]
        if field is None:
            if TimeUnit.parse(unit) is TimeUnit.DURATION:
                raise ValueError("a Timestamp counts ep/ba/sp/tok; use State.get_elapsed_duration() for 'dur'")
            field = _COUNTERS[TimeUnit.parse(unit)]
        return getattr(self, field)

    def to_next_batch(self, samples: int, tokens: int = 0, duration: float = 0.0) -> Timestamp:
        return Timestamp(
            self.epoch,
            self.batch + 1,
            self.sample + samples,
            self.token + tokens,
            self.batch_in_epoch + 1,
            self.sample_in_epoch + samples,
            self.token_in_epoch + tokens,
            self.total_wct + duration,
            self.epoch_wct + duration,
            duration,
        )

    def to_next_epoch(self) -> Timestamp:
        return replace(
            self,
            epoch=self.epoch + 1,
            batch_in_epoch=0,
            sample_in_epoch=0,
            token_in_epoch=0,
            epoch_wct=0.0,
        )

    def state_dict(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state_dict(cls, state: dict[str, int | float]) -> Timestamp:
        names = {f.name for f in fields(cls)}
        unknown = set(state) - names
        if unknown:
            raise ValueError(f"unknown Timestamp fields in checkpoint: {sorted(unknown)}")
        return cls(**state)


_COUNTERS = {TimeUnit.EPOCH: "epoch", TimeUnit.BATCH: "batch", TimeUnit.SAMPLE: "sample", TimeUnit.TOKEN: "token"}
