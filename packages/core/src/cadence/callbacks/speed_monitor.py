"""`SpeedMonitor`: throughput over a rolling window of batches, and wall-clock time (Composer's callback).

Each batch is timed from BEFORE_DATALOADER to BATCH_END, so waiting for data counts and
evaluation and checkpointing (which run after BATCH_END) do not. Sample and token counts come
from ``state.timestamp``, which counts this rank's batches; the global rates multiply by the
world size, as every rank trains a shard of the same size.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from cadence.callback import Callback
from cadence.ops.checks import check_choice, check_int, check_number

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["SpeedMonitor"]

_SECONDS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}


class SpeedMonitor(Callback):
    """Logs ``throughput/*`` once `window_size` batches are timed, and ``time/*`` every batch.

    Args:
        window_size: the number of most recent batches the rates average over.
        gpu_flops_available: peak FLOP/s of one device; with a model that has ``flops_per_batch(batch)``
            it gives ``throughput/device/mfu``. Not guessed from the GPU's name (Composer does).
        time_unit: the unit of ``time/train``, ``time/val`` and ``time/total``.
    """

    def __init__(self, window_size: int = 100, gpu_flops_available: float | None = None, time_unit: str = "hours"):
        self.window_size = check_int("window_size", window_size, ge=1, hint="the default is 100 batches")
        if gpu_flops_available is not None:
            gpu_flops_available = check_number("gpu_flops_available", gpu_flops_available, gt=0)
        self.gpu_flops_available = gpu_flops_available
        self.time_unit = check_choice("time_unit", time_unit, _SECONDS)
        self._window: deque[tuple[float, int, int, float]] = deque(maxlen=self.window_size)
        self._batch_start: tuple[float, int, int] | None = None
        self._eval_start: float | None = None
        self.total_train_s = 0.0
        self.total_eval_s = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"total_train_s": self.total_train_s, "total_eval_s": self.total_eval_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total_train_s = float(state["total_train_s"])
        self.total_eval_s = float(state["total_eval_s"])

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._batch_start = (time.perf_counter(), state.timestamp.sample, state.timestamp.token)

    def batch_end(self, state: State, logger: Logger) -> None:
        if self._batch_start is None:  # driven without BEFORE_DATALOADER: nothing was timed
            return
        started, samples, tokens = self._batch_start
        self._batch_start = None
        seconds = time.perf_counter() - started
        self.total_train_s += seconds
        flops_fn = getattr(state.model, "flops_per_batch", None)
        flops = float(flops_fn(state.batch)) if callable(flops_fn) else 0.0
        self._window.append((seconds, state.timestamp.sample - samples, state.timestamp.token - tokens, flops))
        if len(self._window) == self.window_size:
            logger.log_metrics(self._throughput(state.world_size))
        unit = _SECONDS[self.time_unit]
        times = {"train": self.total_train_s, "val": self.total_eval_s, "total": self.total_train_s + self.total_eval_s}
        metrics = {f"time/{name}": value / unit for name, value in times.items()}
        metrics.update({f"time_{self.time_unit}/{name}": value / unit for name, value in times.items()})
        metrics["time/secs_per_step"] = seconds
        logger.log_metrics(metrics)

    def _throughput(self, world_size: int) -> dict[str, float]:
        """Global rates (every rank's samples; a batch is one step of every rank) and, as in Composer,
        per-device rates: the global ones divided by the world size."""
        seconds = sum(entry[0] for entry in self._window)
        samples, tokens, flops = (sum(entry[i] for entry in self._window) * world_size for i in (1, 2, 3))
        rates = {"batches_per_sec": len(self._window) / seconds, "samples_per_sec": samples / seconds}
        if tokens:
            rates["tokens_per_sec"] = tokens / seconds
        if flops:
            rates["flops_per_sec"] = flops / seconds
        metrics = {f"throughput/{name}": value for name, value in rates.items()}
        metrics.update({f"throughput/device/{name}": value / world_size for name, value in rates.items()})
        if flops and self.gpu_flops_available:
            metrics["throughput/device/mfu"] = metrics["throughput/device/flops_per_sec"] / self.gpu_flops_available
        return metrics

    def eval_start(self, state: State, logger: Logger) -> None:
        self._eval_start = time.perf_counter()

    def eval_end(self, state: State, logger: Logger) -> None:
        if self._eval_start is not None:
            self.total_eval_s += time.perf_counter() - self._eval_start
            self._eval_start = None
