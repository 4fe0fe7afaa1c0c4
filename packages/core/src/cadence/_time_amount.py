"""`Time`: an amount of training time in one unit (``Time(10, "ep")``, ``"100ba"``).

`cadence.time` is its public home (``from cadence.time import Time``); it lives here so that
`cadence.time` reads as the `Timestamp` and the argument helpers.
"""

from __future__ import annotations

from typing import Any, Union

from cadence._timestring import Count, NotAWholeCountError, TimeUnit, checked_value, split_timestring

__all__ = ["NotATimeError", "Time", "TimeLike", "TimeUnitMismatchError"]

TimeLike = Union["Time", str, int]


class TimeUnitMismatchError(RuntimeError, ValueError):
    """Arithmetic or ordering across units (``1ep + 1ba``). Composer raises RuntimeError and cadence
    raised ValueError, so this is both: ``except`` clauses written for either keep working."""


class NotATimeError(TypeError, RuntimeError):
    """A value `Time.from_input` cannot read (``None``, a list): Composer's RuntimeError, cadence's TypeError."""


class Time:
    """An amount of training time in one unit. Immutable.

    ``Time(10, "ep")``, ``Time(10, "epoch")`` and ``Time.from_timestring("10ep")`` are the same.
    Arithmetic and ordering need equal units (a plain number takes this Time's unit) and raise
    `TimeUnitMismatchError` otherwise; ``time * 0.5`` scales (used by ``scale_schedule_ratio``);
    ``Time / Time`` is a ``dur``. Results may be negative (``1ep - 2ep`` is ``-1ep``); a Time built
    from a user's value or string may not, since no cadence argument means a negative amount.
    """

    __slots__ = ("unit", "value")
    unit: TimeUnit
    value: int | float

    def __init__(self, value: int | float, unit: TimeUnit | str):
        unit = TimeUnit.parse(unit)
        value = checked_value(value, unit)
        if value < 0:
            raise ValueError(f"Time value must be >= 0, got {value!r} {unit.value}")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "unit", unit)

    @classmethod
    def _result(cls, value: int | float, unit: TimeUnit) -> Time:
        """An arithmetic result: checked like a user's value, except that it may be negative."""
        time = object.__new__(cls)
        object.__setattr__(time, "value", checked_value(value, unit))
        object.__setattr__(time, "unit", unit)
        return time

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Time is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return Time._result, (self.value, self.unit)

    @classmethod
    def from_timestring(cls, text: str) -> Time:
        return cls(*split_timestring(text))

    # Composer's named constructors: ``Time.from_epoch(3) == Time(3, TimeUnit.EPOCH)`` ----------------
    @classmethod
    def from_iteration(cls, iteration: int) -> Time:
        return cls(iteration, TimeUnit.ITERATION)

    @classmethod
    def from_epoch(cls, epoch: int) -> Time:
        return cls(epoch, TimeUnit.EPOCH)

    @classmethod
    def from_batch(cls, batch: int) -> Time:
        return cls(batch, TimeUnit.BATCH)

    @classmethod
    def from_sample(cls, sample: int) -> Time:
        return cls(sample, TimeUnit.SAMPLE)

    @classmethod
    def from_token(cls, token: int) -> Time:
        return cls(token, TimeUnit.TOKEN)

    @classmethod
    def from_duration(cls, duration: float) -> Time:
        """A fraction of the whole run (``0.5`` is half-way)."""
        return cls(duration, TimeUnit.DURATION)

    @classmethod
    def from_second(cls, second: int) -> Time:
        return cls(second, TimeUnit.SECOND)

    @classmethod
    def from_timedelta(cls, timestring: str) -> Time:
        """A wall-clock string (``"1h30m"``, ``"45s"``) in seconds, as Composer's ``from_timedelta``."""
        value, unit = split_timestring(timestring)
        if unit is not TimeUnit.SECOND or "sec" in timestring.lower():
            raise ValueError(f"from_timedelta takes a wall-clock string like '1h30m' or '45s', got {timestring!r}")
        return cls(value, unit)

    @classmethod
    def from_input(cls, value: TimeLike | float, default_int_unit: TimeUnit | str = TimeUnit.EPOCH) -> Time:
        """Accept a `Time`, a time string, a `Timestamp` count, or a number (taken in `default_int_unit`).

        Anything else (``None``, a list) raises `NotATimeError`, a TypeError and Composer's RuntimeError.
        """
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value)
        if isinstance(value, Count):
            return cls(int(value), value.unit)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value, default_int_unit)
        if isinstance(value, float):  # Composer's too: 0.5 with 'dur', or a whole number of a count
            try:
                return cls(value, default_int_unit)
            except NotAWholeCountError as error:
                raise NotAWholeCountError(f"expected a Time, a string like '10ep' or a whole number: {error}") from None
        raise NotATimeError(
            f"expected a Time, a string like '10ep' or a number, got {value!r} ({type(value).__name__})"
        )

    def to_timestring(self) -> str:
        """``Time(5, 'ep').to_timestring() == '5ep'``; `from_timestring` reads it back."""
        return str(self)

    # Arithmetic -----------------------------------------------------------------------
    def _coerce(self, other: Any) -> Time:
        if isinstance(other, Time):
            return other
        if isinstance(other, Count):
            return Time._result(int(other), other.unit)
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Time._result(other, self.unit)
        if isinstance(other, str):
            return Time.from_timestring(other)
        return NotImplemented

    def _same_unit(self, other: Any, op: str) -> Time:
        other = self._coerce(other)
        if other is not NotImplemented and other.unit is not self.unit:
            raise TimeUnitMismatchError(f"cannot {op} {self} and {other}: units differ; convert one first")
        return other

    def _scaled(self, factor: float) -> Time:
        value = self.value * factor
        return Time._result(value if self.unit is TimeUnit.DURATION else round(value), self.unit)

    def __add__(self, other: Any) -> Time:
        other = self._same_unit(other, "add")
        return other if other is NotImplemented else Time._result(self.value + other.value, self.unit)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Time:
        other = self._same_unit(other, "subtract")
        return other if other is NotImplemented else Time._result(self.value - other.value, self.unit)

    def __rsub__(self, other: Any) -> Time:
        other = self._same_unit(other, "subtract")
        return other if other is NotImplemented else Time._result(other.value - self.value, self.unit)

    def __mod__(self, other: Any) -> Time:
        other = self._same_unit(other, "take the remainder of")
        return other if other is NotImplemented else Time._result(self.value % other.value, self.unit)

    def __neg__(self) -> Time:
        return Time._result(-self.value, self.unit)

    def __pos__(self) -> Time:
        return self

    def __mul__(self, factor: Any) -> Time:
        """A number scales; a Time multiplies only when one side is ``dur`` (``2ep * 0.5dur == 1ep``)."""
        if isinstance(factor, (int, float)) and not isinstance(factor, (bool, Count)):
            return self._scaled(factor)
        other = self._coerce(factor)
        if other is NotImplemented:
            return other
        if other.unit is TimeUnit.DURATION:
            return self._scaled(other.value)
        if self.unit is TimeUnit.DURATION:
            return other._scaled(self.value)
        raise TimeUnitMismatchError(f"cannot multiply {self} by {other}: one of them must be in 'dur'")

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Time:
        """By a number: scaled in this unit. By a Time of the same unit: their ratio, in ``dur``."""
        if isinstance(other, (int, float)) and not isinstance(other, (bool, Count)):
            return self._scaled(1 / other)
        other = self._same_unit(other, "divide")
        return other if other is NotImplemented else Time._result(self.value / other.value, TimeUnit.DURATION)

    def __rtruediv__(self, other: Any) -> Time:
        other = self._same_unit(other, "divide")
        return other if other is NotImplemented else Time._result(other.value / self.value, TimeUnit.DURATION)

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def _cmp_value(self, other: Any) -> float:
        other = self._same_unit(other, "compare")
        if other is NotImplemented:
            raise TypeError(f"cannot compare {self} with {other!r}")
        return other.value

    def __eq__(self, other: Any) -> bool:
        """Times in different units are unequal (no error), so Times can sit in sets and dicts."""
        if isinstance(other, (Time, Count)):
            return self.unit is other.unit and self.value == (other if isinstance(other, Count) else other.value)
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
        """Composer's form, which ``eval`` reads back where `TimeUnit` is imported: ``Time(1, TimeUnit.TOKEN)``."""
        return f"Time({self.value!r}, TimeUnit.{self.unit.name})"

    def __str__(self) -> str:
        return f"{self.value}{self.unit.value}"


Time.__module__ = "cadence.time"  # its public home: pickles and tracebacks name cadence.time.Time
