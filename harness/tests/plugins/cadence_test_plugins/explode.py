"""`explode`: a method that crashes its run on purpose."""

from __future__ import annotations

import os
from typing import Any

from cadence import Algorithm, Event, State

__all__ = ["Explode"]


class Explode(Algorithm):
    """Ends the process abruptly (no Python exception, no chance to log) on the first batch of seed `on_seed`.

    Only while ``$CADENCE_TEST_EXPLODE`` is set, so a rerun of the same configuration can succeed.
    """

    events = (Event.AFTER_DATALOADER,)

    def __init__(self, on_seed: int = 1, how: str = "exit"):
        if how not in ("exit", "raise"):
            raise ValueError(f"how={how!r} must be 'exit' or 'raise'")
        self.on_seed = on_seed
        self.how = how

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if os.environ.get("CADENCE_TEST_EXPLODE") and state.rank_zero_seed == self.on_seed:
            if self.how == "raise":
                raise RuntimeError("exploded on purpose")
            os._exit(7)

    def __repr__(self) -> str:
        return f"Explode(on_seed={self.on_seed}, how={self.how!r})"
