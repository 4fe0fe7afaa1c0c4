"""What `Engine.run_event` returns: which methods ran on an event, with what their ``apply`` returned."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cadence.event import Event

if TYPE_CHECKING:
    from cadence.algorithm import Algorithm

__all__ = ["NO_TRACES", "LazyTraces", "Trace", "Traces"]


@dataclass(frozen=True)
class Trace:
    """One method's run on one event (Composer's ``Trace``): `exit_code` is what its ``apply`` returned,
    `order` its position among the methods that ran on the event."""

    name: str
    event: Event
    exit_code: int | None = None
    order: int | None = None
    run: bool = False


Traces = Mapping[str, Trace]
"""``"{repr(method)}/{event}"`` -> `Trace`, as `Engine.run_event` returns it."""

NO_TRACES: Traces = MappingProxyType({})  # the usual answer: nothing ran, nothing allocated


class LazyTraces(Mapping[str, Trace]):
    """The traces of one event, built on first read: most callers never look, so a matched method
    costs a tuple in a list rather than a `Trace` and its key."""

    __slots__ = ("_built", "_event", "_names", "_ran")

    def __init__(self, event: Event, ran: list[tuple[Algorithm, Any]], names: dict[int, str]):
        self._event, self._ran, self._names = event, ran, names
        self._built: dict[str, Trace] | None = None

    def _traces(self) -> dict[str, Trace]:
        if self._built is None:
            event, built = self._event, dict[str, Trace]()
            for algorithm, exit_code in self._ran:
                key = (self._names.get(id(algorithm)) or f"{algorithm!r}/") + event.value
                built[key] = Trace(algorithm.name, event, exit_code, len(built), True)
            self._built = built
        return self._built

    def __getitem__(self, key: str) -> Trace:
        return self._traces()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._traces())

    def __len__(self) -> int:
        return len(self._traces())

    def __repr__(self) -> str:
        return repr(self._traces())
