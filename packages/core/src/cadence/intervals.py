"""When to evaluate or checkpoint: ``"1ep"``, ``"500ba"``, ``"0.25dur"``, an int (epochs), 0 (never),
or a callable ``(state, event) -> bool`` asked at every ``BATCH_END`` and ``EPOCH_END``."""

from __future__ import annotations

from collections.abc import Callable

from cadence.event import Event
from cadence.ops.checks import check_callable
from cadence.state import State
from cadence.time import Time, TimeUnit

__all__ = ["Interval", "IntervalLike", "parse_interval"]

Interval = Callable[[State, Event], bool]
IntervalLike = str | int | Time | Interval


def parse_interval(value: IntervalLike, name: str) -> Interval | None:
    """Turn a user's interval into a predicate, or None when it is disabled (0)."""
    if callable(value) and not isinstance(value, Time):
        return check_callable(name, value, arguments=2, signature="(state, event) -> bool")
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return None
    try:
        every = Time.from_input(value, TimeUnit.EPOCH)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}={value!r}: {error}") from None
    if every.value <= 0:
        raise ValueError(f"{name}={value!r} must be positive (use 0 to disable)")
    if every.unit is TimeUnit.EPOCH:
        epochs = int(every.value)
        return lambda state, event: event is Event.EPOCH_END and state.timestamp.epoch % epochs == 0
    if every.unit is TimeUnit.BATCH:
        batches = int(every.value)
        return lambda state, event: event is Event.BATCH_END and state.timestamp.batch % batches == 0
    if every.unit is TimeUnit.DURATION:
        return lambda state, event: (
            event is Event.BATCH_END and state.timestamp.batch % max(state.to_batches(every), 1) == 0
        )
    raise ValueError(f"{name}={value!r}: intervals take ep, ba or dur units")
