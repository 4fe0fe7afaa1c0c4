"""`count`: records each construction, to count how often the harness builds a method."""

from __future__ import annotations

import os

from cadence_test_plugins.inactive import Inactive

__all__ = ["Count"]


class Count(Inactive):
    """Records every construction in `Count.built` (this process only)."""

    built: list[int] = []

    def __init__(self, step: int = 1):
        self.step = step
        Count.built.append(os.getpid())
