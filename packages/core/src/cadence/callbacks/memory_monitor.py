"""`MemoryMonitor`: device memory (CUDA) and host process memory after every training batch.

On a CUDA device it logs ``torch.cuda.memory_stats()`` under Composer's keys, in gigabytes
(1e9 bytes), counts as they are. On every device it also logs the process's host memory,
which Composer does not, so that a CPU run (or a leaking data pipeline) shows something:
``memory/host/peak_rss_gb`` from the standard library's ``resource`` module (Unix) and
``memory/host/rss_gb`` when psutil is installed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from cadence.callback import Callback

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["DEFAULT_MEMORY_KEYS", "MemoryMonitor", "host_memory_gb"]

DEFAULT_MEMORY_KEYS = {
    "allocated_bytes.all.current": "current_allocated_mem",
    "active_bytes.all.current": "current_active_mem",
    "inactive_split_bytes.all.current": "current_inactive_mem",
    "reserved_bytes.all.current": "current_reserved_mem",
    "allocated_bytes.all.peak": "peak_allocated_mem",
    "active_bytes.all.peak": "peak_active_mem",
    "inactive_split_bytes.all.peak": "peak_inactive_mem",
    "reserved_bytes.all.peak": "peak_reserved_mem",
    "num_alloc_retries": "alloc_retries",
}
"""``torch.cuda.memory_stats()`` name -> the ``memory/<name>`` key it is logged under (Composer's)."""


def host_memory_gb() -> dict[str, float]:
    """This process's peak resident memory (``resource``, Unix) and current one (psutil, when installed)."""
    report: dict[str, float] = {}
    try:
        import resource
    except ImportError:  # Windows
        pass
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        report["memory/host/peak_rss_gb"] = peak / 1e9 if sys.platform == "darwin" else peak * 1024 / 1e9
    try:
        import psutil
    except ImportError:
        pass
    else:
        report["memory/host/rss_gb"] = psutil.Process().memory_info().rss / 1e9
    return report


class MemoryMonitor(Callback):
    """Logs memory on AFTER_TRAIN_BATCH (the peak of the step: gradients exist, activations were freed).

    Args:
        memory_keys: ``{torch.cuda.memory_stats() name: logged name}``; `DEFAULT_MEMORY_KEYS` when None.
            Byte counts are logged in gigabytes.
    """

    def __init__(self, memory_keys: Mapping[str, str] | None = None):
        if memory_keys is not None and not isinstance(memory_keys, Mapping):
            raise TypeError(
                f"memory_keys={memory_keys!r} must be a dict {{torch.cuda.memory_stats() name: logged name}}, "
                "e.g. {'allocated_bytes.all.peak': 'peak_allocated_mem'}, or None for the defaults"
            )
        self.memory_keys = dict(DEFAULT_MEMORY_KEYS if memory_keys is None else memory_keys)

    def after_train_batch(self, state: State, logger: Logger) -> None:
        report = host_memory_gb()
        if state.device.type == "cuda":
            report.update(self._cuda_report(state.device))
        logger.log_metrics(report)

    def _cuda_report(self, device: torch.device) -> dict[str, float]:
        stats = torch.cuda.memory_stats(device)
        report = {}
        for torch_name, name in self.memory_keys.items():
            value = stats.get(torch_name, 0)
            report[f"memory/{name}"] = value / 1e9 if "bytes" in torch_name else float(value)
        return report
