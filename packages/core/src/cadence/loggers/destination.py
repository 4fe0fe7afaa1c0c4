"""`LoggerDestination`: the base class of a place logged values go (in-memory, console, MLflow, ...).

A destination is also a `Callback`, so it can follow the loop (a progress bar on BATCH_END)
and keep state in checkpoints (the MLflow run it logs to).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cadence.callback import Callback

__all__ = ["STATUSES", "LoggerDestination"]

STATUSES = ("FINISHED", "FAILED", "KILLED")
"""How a run ends: FINISHED, FAILED (an exception escaped), KILLED (SIGINT or SIGTERM)."""


class LoggerDestination(Callback):
    """A place logged values go. Subclasses override what they support."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        del metrics, step

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        del params

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Keep a file produced by the run (a plot, a resolved config)."""
        del path, name

    def flush(self, timeout_s: float | None = None) -> bool | None:
        """Write everything buffered so far (waiting at most `timeout_s`); False if some was not delivered."""
        del timeout_s
        return None

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        """End the destination's record of the run with `status` (one of `STATUSES`) and the error.

        The `Trainer` calls it exactly once per run; a destination used without a trainer is
        finished by whoever drives it.
        """
        del status, error
