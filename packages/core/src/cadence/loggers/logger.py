"""`Logger`: what methods and the trainer call to log; it fans each call out to the run's destinations.

Metric values may be tensors: destinations read them back to the host only when they
write, so logging a per-step loss costs no device synchronisation.

The destinations are typed by the `Destination` protocol rather than by `LoggerDestination`
(a `Callback`), so that this module sits below `cadence.callback` and imports nothing of it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cadence.state import State

__all__ = ["Destination", "Logger", "failure_kind", "run_hyperparameters"]


def run_hyperparameters(state: State) -> dict[str, Any]:
    """What the trainer logs about a run at FIT_START: the methods by their repr, with arguments, and the seed of
    each method's generator (``seed/MixUp/mixup``: derived from the run's seed unless the method was given one)."""
    seeds = {}
    for algorithm in state.algorithms:
        if callable(getattr(type(algorithm), "generator_seeds", None)):  # the class's: a Mock's attributes are not
            seeds.update({f"seed/{type(algorithm).__name__}/{k}": v for k, v in algorithm.generator_seeds().items()})
    return seeds | {
        "seed": state.rank_zero_seed,
        "max_duration": str(state.max_duration),
        # Composer's spelling, as the Trainer's `device` argument takes it ('cpu', 'gpu'), so that a caller that logs
        # the same setting (the harness logs its recipe's `device`) logs the same value, not 'gpu' beside 'cuda'
        "device": "gpu" if state.device.type == "cuda" else state.device.type,
        "precision": state.precision.value,
        "device_train_microbatch_size": state.device_train_microbatch_size,
        "world_size": state.world_size,
        "scale_schedule_ratio": state.scale_schedule_ratio,
        "algorithms": ", ".join(repr(a) for a in state.algorithms),
    }


def failure_kind(error: BaseException) -> str:
    """A short label for why a run failed: ``oom`` for out-of-memory errors, else the exception's class."""
    if type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower():
        return "oom"
    return type(error).__name__


class Destination(Protocol):
    """Where logged values go (`cadence.loggers.LoggerDestination` is the base class to subclass)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None: ...
    def log_hyperparameters(self, params: Mapping[str, Any]) -> None: ...
    def log_artifact(self, path: str | Path, name: str | None = None) -> None: ...
    def flush(self, timeout_s: float | None = None) -> bool | None: ...
    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None: ...


class Logger:
    """Fans logged values out to every destination. The step defaults to the current batch."""

    def __init__(self, state: State | None = None, destinations: Sequence[Destination] = ()):
        self._state = state
        self.destinations: tuple[Destination, ...] = tuple(destinations)

    def _step(self, step: int | None) -> int:
        if step is not None:
            return step
        return int(self._state.timestamp.batch) if self._state is not None else 0  # a plain int for destinations

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not self.destinations:
            return
        if step is None:  # `_step`, inline: the trainer logs every batch
            step = int(self._state.timestamp.batch) if self._state is not None else 0
        for destination in self.destinations:
            destination.log_metrics(metrics, step)

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        for destination in self.destinations:
            destination.log_hyperparameters(params)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        for destination in self.destinations:
            destination.log_artifact(path, name)

    def log_table(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str = "Table", step: int | None = None
    ) -> None:
        """A table (Composer's ``log_table``), for the destinations that keep tables; the others skip it."""
        for destination in self.destinations:
            log_table = getattr(destination, "log_table", None)
            if log_table is not None:
                log_table(columns, rows, name=name, step=self._step(step))

    def flush(self) -> None:
        for destination in self.destinations:
            destination.flush()

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        """Mark the run ended on every destination; a failing destination never hides the others."""
        for destination in self.destinations:
            try:
                destination.finish(status, error=error)
            except Exception as failure:  # reporting a failure must not raise a second one
                warnings.warn(f"{type(destination).__name__}.finish({status!r}) failed: {failure!r}", stacklevel=2)
