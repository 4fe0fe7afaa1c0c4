"""Training time: `Time` (an amount in one unit), `TimeUnit`, and `Timestamp` (where a run is).

Strings follow Composer (see `cadence._timestring`): ``"10ep"``, ``"100ba"``, ``"3e4sp"``,
``"4_000tok"``, ``"0.5dur"``, ``"2iter"``, ``"60sec"``, ``"1h30m"``. Only ``dur`` (a fraction of
the whole run) may be fractional, so ``"1.5ep"`` is refused rather than silently truncated.
"""

from __future__ import annotations

import datetime
import operator
from collections.abc import Callable
from dataclasses import KW_ONLY, FrozenInstanceError, dataclass, fields, replace
from typing import Any

from cadence._time_amount import NotATimeError, Time, TimeLike, TimeUnitMismatchError
from cadence._timestring import (
    Count,
    NotAWholeCountError,
    Seconds,
    TimeUnit,
    as_count,
    count_unchecked,
    with_iteration_start,
)

__all__ = ["NotATimeError", "NotAWholeCountError", "Time", "TimeLike", "TimeUnit", "TimeUnitMismatchError"]
__all__ += ["Timestamp", "ensure_time", "parse_time"]


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
    method may keep a reference to an old timestamp safely. ``copy(**fields)`` makes a changed one
    (Composer's way too); only ``epoch_in_iteration`` may be assigned, as in Composer. Each counter is an int that also
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
            total_wct=float.__new__(Seconds, self.total_wct + seconds),  # Seconds(), without its type checks
            epoch_wct=float.__new__(Seconds, self.epoch_wct + seconds),
            batch_wct=float.__new__(Seconds, seconds),
        )
        if tokens:  # counts are immutable: without tokens (images) the old ones are the new ones
            advanced.__dict__.update(
                token=count_unchecked(self.token + tokens, _TOK),
                token_in_epoch=count_unchecked(self.token_in_epoch + tokens, _TOK),
                token_in_iteration=count_unchecked(self.token_in_iteration + tokens, _TOK),
            )
        return advanced

    def to_next_epoch(self, duration: float | datetime.timedelta | None = 0.0) -> Timestamp:
        """The start of the next epoch; `duration` is wall-clock time spent since the last batch. The epoch and
        batch wall-clock times restart at 0, as in Composer."""
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
            batch_wct=0.0,
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


def _assign(self: Timestamp, name: str, value: Any) -> None:
    """Composer's one settable field, ``epoch_in_iteration``; every other field is read-only, since methods and
    loggers keep references to timestamps the trainer has moved past."""
    if name == "epoch_in_iteration":
        object.__setattr__(self, name, as_count(name, value, _EP))
        return
    raise FrozenInstanceError(
        f"cannot assign to Timestamp.{name}: a Timestamp is immutable; make a changed one with "
        f"timestamp.copy({name}=...) (in a test: state.timestamp = state.timestamp.copy({name}=...))"
    )


Timestamp.__setattr__ = _assign  # type: ignore[method-assign,assignment]  # after @dataclass, which forbids it
_FIELD_NAMES = {f.name for f in fields(Timestamp)}
