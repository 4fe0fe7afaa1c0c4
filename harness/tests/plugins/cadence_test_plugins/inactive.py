"""The base of the test methods that do nothing while training."""

from __future__ import annotations

from typing import Any

from cadence import Algorithm, Event, State

__all__: list[str] = []


class Inactive(Algorithm):
    """Runs on no event."""

    def match(self, event: Event, state: State) -> bool:
        return False

    def apply(self, event: Event, state: State, logger: Any) -> None:
        pass
