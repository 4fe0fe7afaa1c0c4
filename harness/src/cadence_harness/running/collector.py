"""Python's garbage collector: a full collection before each run, and the pauses inside its timing recorded.

A full (generation-2) collection walks every object the collector tracks. With torch, MLflow, the
harness and a model loaded, that is over a million objects, and one pause takes a large fraction of a
second of host time. The collector starts one when enough objects have survived into the oldest
generation since the last one. Building the data, the model and the MLflow run allocates that many,
so without help the pause lands in the first steps of training: 0.4 s on this project's 2-core VM, a
sixth of a 2.5 s GPU run were its host as slow. Which run it hits depends on what the process did
before, not on the run.

`collect_before_run` runs that collection when the fit starts, before the clocks do (`RunTimer`). It frees the
last run's reference cycles and resets the count of survivors, so training starts with no full collection
due; its seconds are logged (``final/gc_before_s``). A full walk costs once per process (0.3-0.4 s on the
2-core VM); an in-process grid makes the later ones cheap with `collect_and_freeze` before each run: what
is alive between runs (imports, the grid, resident data) moves to the permanent generation, which
collections skip, so the collection at the fit's start walks only what the run built.
`CollectorPauses` times every collection that starts while the training clock
runs (``final/gc_s``, ``final/gc_collections``, ``final/gc_full_collections``): a run's remaining pauses
are recorded, not guessed. Measured: `harness/measurements/2026-11-27-collector-pauses.md`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CollectorPauses", "collect_and_freeze", "collect_before_run"]


def collect_before_run() -> float:
    """A full collection now, outside any timing; returns its seconds."""
    start = time.perf_counter()
    gc.collect()
    return time.perf_counter() - start


def collect_and_freeze() -> float:
    """Between two runs of one process: a full collection, then every object still alive (the imports, the grid,
    the data kept resident) goes into the permanent generation, which later collections skip. Returns the
    seconds. Call it only where no run's objects are alive: frozen objects are never collected, so anything
    frozen that later becomes cyclic garbage would stay."""
    seconds = collect_before_run()
    gc.freeze()
    return seconds


class CollectorPauses:
    """Times the garbage collections that start while `inside()` is true, between `start` and `stop`.

    Args:
        inside: whether the measured region is running now (read when each collection starts).
    """

    def __init__(self, inside: Callable[[], bool]):
        self.inside = inside
        self.seconds = 0.0
        self.collections = [0, 0, 0]  # per generation, those that started inside the region
        self.before_s = 0.0  # the full collection made before the region (`collect_before_run`)
        self._began: float | None = None
        self._installed = False

    def start(self, collect_first: bool = False) -> None:
        """Listen to the collector; with `collect_first`, after a full collection (its seconds: `before_s`)."""
        if collect_first:
            self.before_s = collect_before_run()
        if not self._installed:
            gc.callbacks.append(self._on_collection)
            self._installed = True

    def stop(self) -> None:
        """Stop listening (idempotent: the fit's end and the run's close both call it)."""
        if self._installed:
            gc.callbacks.remove(self._on_collection)
            self._installed = False

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter() if self.inside() else None
        elif self._began is not None:
            self.seconds += time.perf_counter() - self._began
            self.collections[info["generation"]] += 1
            self._began = None

    def summary(self) -> dict[str, float]:
        return {
            "final/gc_s": self.seconds,
            "final/gc_collections": float(sum(self.collections)),
            "final/gc_full_collections": float(self.collections[2]),
            "final/gc_before_s": self.before_s,
        }
