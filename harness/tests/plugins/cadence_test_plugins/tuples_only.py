"""`tuples_only`: refuses dict batches, as a method reading ``batch[1]`` would (tests the applicability check)."""

from __future__ import annotations

from typing import Any

from cadence import NotApplicableError
from cadence_test_plugins.inactive import Inactive

__all__ = ["TuplesOnly"]


class TuplesOnly(Inactive):
    """Refuses dict batches (text), as a method reading ``batch[1]`` would: tests the applicability check."""

    def check_applicable(self, model: Any, batch: Any) -> None:
        if isinstance(batch, dict):
            raise NotApplicableError(
                "TuplesOnly reads batch[1], but the batches are dicts with keys "
                f"{', '.join(map(repr, batch))}; use it with (inputs, targets) batches (image data)"
            )
