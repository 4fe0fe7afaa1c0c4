"""Training time: `Time` (an amount in one unit), `TimeUnit`, and `Timestamp` (where a run is).

Strings follow Composer (see `cadence._timestring`): ``"10ep"``, ``"100ba"``, ``"3e4sp"``,
``"4_000tok"``, ``"0.5dur"``, ``"2iter"``, ``"60sec"``, ``"1h30m"``. Only ``dur`` (a fraction of
the whole run) may be fractional, so ``"1.5ep"`` is refused rather than silently truncated.
"""

from __future__ import annotations

import datetime
import operator
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, fields, replace
from typing import Any, Union

from cadence._timestring import (
    Count,
    NotAWholeCountError,
    Seconds,
    TimeUnit,
    as_count,
    checked_value,
    count_unchecked,
    split_timestring,
    with_iteration_start,
)

__all__ = ["NotAWholeCountError", "Time", "TimeLike", "TimeUnit", "TimeUnitMismatchError", "Timestamp"]
__all__ += ["ensure_time", "parse_time"]

TimeLike = Union["Time", str, int]


class TimeUnitMismatchError(RuntimeError, ValueError):
    """Arithmetic or ordering across units (``1ep + 1ba``). Composer raises RuntimeError and cadence
    raised ValueError, so this is both: ``except`` clauses written for either keep working."""


class Time:
    """An amount of training time in one unit. Immutable.

    ``Time(10, "ep")``, ``Time(10, "epoch")`` and ``Time.from_timestring("10ep")`` are the same.
    Arithmetic and ordering need equal units (a plain number takes this Time's unit) and raise
    `TimeUnitMismatchError` otherwise; ``time * 0.5`` scales (used by ``scale_schedule_ratio``);
    ``Time / Time`` is a ``dur``. Results may be negative (``1ep - 2ep`` is ``-1ep``); a Time built
    from a user's value or string may not, since no cadence argument means a negative amount.
    """

    __slots__ = ("unit", "value")

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

    @classmethod
    def from_input(cls, value: TimeLike, default_int_unit: TimeUnit | str = TimeUnit.EPOCH) -> Time:
        """Accept a `Time`, a time string, a `Timestamp` count, or an int (taken in `default_int_unit`)."""
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value)
        if isinstance(value, Count):
            return cls(int(value), value.unit)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value, default_int_unit)
        raise TypeError(f"expected a Time, a string like '10ep' or an int, got {value!r} ({type(value).__name__})")

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
        raise type(error)(f"{name}={value!r} is not a time: {error}") from None
    names = [unit.value for unit in (units or tuple(TimeUnit))]
    listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
    amount = f"{'a positive' if positive else 'an'} amount of {listed}"
    if (units is not None and time.unit not in units) or (positive and time.value <= 0):
        raise ValueError(f"{name}={value!r} must be {amount}, e.g. '10{names[0]}'")
    return time


_EP, _BA, _SP, _TOK = TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN
_COUNT_FIELDS = {"epoch": _EP, "batch": _BA, "sample": _SP, "token": _TOK, "iteration": TimeUnit.ITERATION}
_COUNT_FIELDS.update(batch_in_epoch=_BA, sample_in_epoch=_SP, token_in_epoch=_TOK)
_COUNT_FIELDS.update(epoch_in_iteration=_EP, token_in_iteration=_TOK)
_COUNTERS = {unit: name for name, unit in list(_COUNT_FIELDS.items())[:5]}  # the run-long counters


@dataclass(frozen=True)
class Timestamp:
    """Where a run is: counters since the start, counters within the epoch, and wall-clock seconds.

    Immutable: the trainer replaces ``state.timestamp`` after every batch and epoch, so a
    method may keep a reference to an old timestamp safely. Each counter is an int that also
    reads like Composer's ``Time[int]`` (``ts.batch.value``, ``ts.batch >= Time(10, 'ba')``); each
    wall-clock field is float seconds that also answers ``total_seconds()``. The iteration fields
    are Composer's; cadence's trainer runs a single iteration, so they stay at 0 unless set.
    The fields after ``batch_wct`` are keyword-only, so cadence's positional order still holds.
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
    _: KW_ONLY
    iteration: int = 0
    epoch_in_iteration: int = 0
    token_in_iteration: int = 0
    iteration_start_wct: float = 0.0  # total_wct when the iteration began, so iteration_wct follows total_wct

    def __post_init__(self) -> None:
        for name, unit in _COUNT_FIELDS.items():
            object.__setattr__(self, name, as_count(name, getattr(self, name), unit))
        for name in ("total_wct", "epoch_wct", "batch_wct", "iteration_start_wct"):
            object.__setattr__(self, name, Seconds(getattr(self, name)))

    @property
    def iteration_wct(self) -> Seconds:
        """Wall-clock seconds of the current iteration (Composer's field; derived, never stored)."""
        return Seconds(self.total_wct - self.iteration_start_wct)

    def get(self, unit: TimeUnit | str) -> Count:
        """The counter for `unit` (``sec``: whole seconds of training)."""
        unit = TimeUnit.parse(unit)
        if unit is TimeUnit.SECOND:
            return Count(int(self.total_wct), TimeUnit.SECOND)
        if unit is TimeUnit.DURATION:
            raise ValueError("a Timestamp counts iter/ep/ba/sp/tok/sec; use State.get_elapsed_duration() for 'dur'")
        return getattr(self, _COUNTERS[unit])

    def copy(self, **changes: Any) -> Timestamp:
        """This timestamp with `changes` (Composer's ``copy``; a None value keeps the field)."""
        changes = with_iteration_start(self.total_wct, changes)
        unknown = sorted(set(changes) - _FIELD_NAMES)
        if unknown:
            raise ValueError(f"unknown Timestamp fields {unknown}; the fields are {sorted(_FIELD_NAMES)}")
        return replace(self, **{name: value for name, value in changes.items() if value is not None})

    def to_next_batch(
        self, samples: int | Time = 0, tokens: int | Time = 0, duration: float | datetime.timedelta | None = 0.0
    ) -> Timestamp:
        """One batch later; `duration` is the batch's wall-clock time (seconds or a ``timedelta``)."""
        seconds = duration if duration.__class__ is float else float(Seconds(duration or 0.0))
        samples = samples if samples.__class__ is int else as_count("samples", samples, _SP)
        tokens = tokens if tokens.__class__ is int else as_count("tokens", tokens, _TOK)
        advanced = object.__new__(Timestamp)  # no __post_init__: its checks cost more than the rest of the step
        advanced.__dict__.update(
            self.__dict__,
            batch=count_unchecked(self.batch + 1, _BA),
            batch_in_epoch=count_unchecked(self.batch_in_epoch + 1, _BA),
            sample=count_unchecked(self.sample + samples, _SP),
            sample_in_epoch=count_unchecked(self.sample_in_epoch + samples, _SP),
            token=count_unchecked(self.token + tokens, _TOK),
            token_in_epoch=count_unchecked(self.token_in_epoch + tokens, _TOK),
            token_in_iteration=count_unchecked(self.token_in_iteration + tokens, _TOK),
            total_wct=float.__new__(Seconds, self.total_wct + seconds),  # Seconds(), without its type checks
            epoch_wct=float.__new__(Seconds, self.epoch_wct + seconds),
            batch_wct=float.__new__(Seconds, seconds),
        )
        return advanced

    def to_next_epoch(self, duration: float | datetime.timedelta | None = 0.0) -> Timestamp:
        """The start of the next epoch; `duration` is wall-clock time spent since the last batch."""
        seconds = float(Seconds(duration or 0.0))
        return replace(
            self,
            epoch=self.epoch + 1,
            epoch_in_iteration=self.epoch_in_iteration + 1,
            batch_in_epoch=0,
            sample_in_epoch=0,
            token_in_epoch=0,
            total_wct=self.total_wct + seconds,
            epoch_wct=0.0,
        )

    def to_next_iteration(self, duration: float | datetime.timedelta | None = 0.0) -> Timestamp:
        """The start of the next iteration (Composer's multi-epoch unit): the in-iteration and in-epoch
        counters restart."""
        seconds = float(Seconds(duration or 0.0))
        return replace(
            self.to_next_epoch(seconds),
            epoch=self.epoch,
            iteration=self.iteration + 1,
            epoch_in_iteration=0,
            token_in_iteration=0,
            iteration_start_wct=self.total_wct + seconds,
            batch_wct=0.0,
        )

    # Composer's comparisons with a Time: ``timestamp >= "2ep"`` reads the counter of that unit --------
    def _counter_and(self, other: Any) -> tuple[Count, Time] | None:
        if isinstance(other, str):
            other = Time.from_timestring(other)
        return (self.get(other.unit), other) if isinstance(other, Time) else None

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Timestamp):
            return self.state_dict() == other.state_dict()
        pair = self._counter_and(other)
        return NotImplemented if pair is None else pair[0] == pair[1]

    def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Timestamp, Any], bool]:  # type: ignore[misc]
        def compare(self: Timestamp, other: Any) -> bool:
            pair = self._counter_and(other)
            return NotImplemented if pair is None else op(*pair)

        return compare

    __lt__, __le__ = _compare(operator.lt), _compare(operator.le)
    __gt__, __ge__ = _compare(operator.gt), _compare(operator.ge)
    del _compare

    # Checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, int | float]:
        """Plain ints and floats, so checkpoints hold no cadence types."""
        return {f.name: (int if f.name in _COUNT_FIELDS else float)(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Timestamp:
        """Fields missing from `state` (checkpoints from before they existed) start at 0; Composer's
        ``timedelta`` wall-clock values are read as seconds."""
        state = with_iteration_start(0.0, state)
        unknown = set(state) - _FIELD_NAMES
        if unknown:
            raise ValueError(f"unknown Timestamp fields in checkpoint: {sorted(unknown)}")
        return cls(**state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Composer's in-place load: fields missing from `state` keep their values. Prefer
        `from_state_dict`; this one changes a timestamp that others may hold."""
        loaded = self.copy(**state)
        for name in _FIELD_NAMES:
            object.__setattr__(self, name, getattr(loaded, name))


_FIELD_NAMES = {f.name for f in fields(Timestamp)}
