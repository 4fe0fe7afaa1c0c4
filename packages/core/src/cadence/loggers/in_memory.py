"""`InMemoryLogger`: keeps every logged value, for tests, notebooks and the harness."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from cadence.loggers.destination import LoggerDestination

__all__ = ["InMemoryLogger"]


def _to_python(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().item() if value.numel() == 1 else value.detach().cpu().tolist()
    return value


class InMemoryLogger(LoggerDestination):
    """Every metric as ``data[name] == [(step, value), ...]`` in logging order.

    Tensor values are stored detached and converted to Python numbers only when read
    through `get_timeseries` or `most_recent_values`.
    """

    def __init__(self) -> None:
        self.data: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        self.hyperparameters: dict[str, Any] = {}
        self.artifacts: list[tuple[Path, str | None]] = []

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach()
            self.data[name].append((step, value))

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        self.hyperparameters.update(params)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.artifacts.append((Path(path), name))

    @property
    def most_recent_values(self) -> dict[str, Any]:
        return {name: _to_python(series[-1][1]) for name, series in self.data.items() if series}

    def get_timeseries(self, name: str) -> tuple[list[int], list[Any]]:
        """Steps and values (as Python numbers) of one metric."""
        if name not in self.data:
            known = ", ".join(sorted(self.data)) or "none yet"
            raise KeyError(f"no metric {name!r} was logged; logged metrics: {known}")
        series = self.data[name]
        return [step for step, _ in series], [_to_python(value) for _, value in series]
