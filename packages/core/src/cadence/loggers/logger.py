"""`Logger` (what methods and the trainer call) and `LoggerDestination` (where values go).

Metric values may be tensors: destinations read them back to the host only when they
write, so logging a per-step loss costs no device synchronisation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadence.callback import Callback

if TYPE_CHECKING:
    from cadence.state import State

__all__ = ["Logger", "LoggerDestination"]


class LoggerDestination(Callback):
    """A place logged values go. Subclasses override what they support."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        del metrics, step

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        del params

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Keep a file produced by the run (a plot, a resolved config)."""
        del path, name

    def flush(self) -> None:
        """Write everything buffered so far."""


class Logger:
    """Fans logged values out to every destination. The step defaults to the current batch."""

    def __init__(self, state: State | None = None, destinations: Sequence[LoggerDestination] = ()):
        self._state = state
        self.destinations: tuple[LoggerDestination, ...] = tuple(destinations)

    def _step(self, step: int | None) -> int:
        if step is not None:
            return step
        return self._state.timestamp.batch if self._state is not None else 0

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not self.destinations:
            return
        step = self._step(step)
        for destination in self.destinations:
            destination.log_metrics(metrics, step)

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        for destination in self.destinations:
            destination.log_hyperparameters(params)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        for destination in self.destinations:
            destination.log_artifact(path, name)

    def flush(self) -> None:
        for destination in self.destinations:
            destination.flush()
