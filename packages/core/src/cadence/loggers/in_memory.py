"""`InMemoryLogger`: keeps every logged value, for tests, notebooks and the harness.

Its shape is Composer's: ``data[name] == [(Timestamp, value), ...]``, `get_timeseries` returns a
dict of arrays keyed by the metric and by every time unit, and tables are kept as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cadence.loggers.destination import LoggerDestination
from cadence.time import Timestamp

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["InMemoryLogger"]


def _to_python(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().item() if value.numel() == 1 else value.detach().cpu().tolist()
    return value


class InMemoryLogger(LoggerDestination):
    """Every metric as ``data[name] == [(Timestamp, value), ...]`` in logging order.

    The timestamp is the run's (``state.timestamp``, an immutable snapshot) when the value was
    logged; the logger learns the state on INIT, as in Composer. Used without a trainer (no INIT),
    it records ``Timestamp(batch=step)``. Tensor values are stored detached and converted to Python
    numbers only when read (`get_timeseries`, `most_recent_values`), so logging costs no device sync.

    Attributes:
        data: every logged value with its timestamp, by metric name.
        state: the `State` of the run (set on INIT), or None.
        hyperparameters: everything given to `log_hyperparameters`.
        tables: table name -> JSON ``{"columns": [...], "data": [[...], ...]}`` (pandas' ``orient="split"``).
        artifacts: ``(path, name)`` of every file given to `log_artifact`.
    """

    def __init__(self) -> None:
        self.data: dict[str, list[tuple[Timestamp, Any]]] = {}
        self.state: State | None = None
        self.hyperparameters: dict[str, Any] = {}
        self.tables: dict[str, str] = {}
        self.artifacts: list[tuple[Path, str | None]] = []
        self._steps: dict[str, list[int]] = {}  # the step each value was logged at, for `steps_and_values`

    def init(self, state: State, logger: Logger) -> None:
        self.state = state

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        timestamp = self.state.timestamp if self.state is not None else Timestamp(batch=step)
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach()
            self.data.setdefault(name, []).append((timestamp, value))
            self._steps.setdefault(name, []).append(int(step))

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        self.hyperparameters.update(params)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.artifacts.append((Path(path), name))

    def log_table(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str = "Table", step: int | None = None
    ) -> None:
        """Keep a table as JSON (``tables[name]``); a later table of the same name replaces it."""
        del step
        columns = [str(column) for column in columns]
        for index, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(
                    f"log_table({name!r}): rows[{index}] has {len(row)} values but there are {len(columns)} "
                    f"columns {columns}; give every row one value per column"
                )
        data = [[_to_python(value) for value in row] for row in rows]
        self.tables[name] = json.dumps({"columns": columns, "data": data}, default=str, ensure_ascii=False)

    @property
    def most_recent_values(self) -> dict[str, Any]:
        """The last value of every metric, as Python numbers."""
        return {name: _to_python(series[-1][1]) for name, series in self.data.items() if series}

    @property
    def most_recent_timestamps(self) -> dict[str, Timestamp]:
        """The `Timestamp` of the last value of every metric."""
        return {name: series[-1][0] for name, series in self.data.items() if series}

    def get_timeseries(self, metric: str) -> dict[str, np.ndarray]:
        """One metric over time, as Composer returns it: ``{metric: values, "epoch": ..., "batch": ..., ...}``.

        Every field of `Timestamp` is a key (``epoch``, ``batch``, ``sample``, ``token``, the
        ``*_in_epoch`` counters and the ``*_wct`` seconds); entry ``i`` of each array belongs to value
        ``i``. E.g. ``plt.plot(ts["batch"], ts["loss/train/total"])``.
        """
        series = self._series(metric)
        timeseries: dict[str, list[Any]] = {metric: [_to_python(value) for _, value in series]}
        for timestamp, _ in series:
            for unit, count in timestamp.state_dict().items():
                timeseries.setdefault(unit, []).append(count)
        return {key: np.asarray(values) for key, values in timeseries.items()}

    def steps_and_values(self, metric: str) -> tuple[list[int], list[Any]]:
        """The steps each value was logged at and the values (as Python numbers) of one metric.

        The step is the one given to ``Logger.log_metrics`` (the current batch by default), which
        may differ from the timestamp's batch when a caller passes ``step=`` explicitly.
        """
        series = self._series(metric)
        return list(self._steps[metric]), [_to_python(value) for _, value in series]

    def _series(self, metric: str) -> list[tuple[Timestamp, Any]]:
        if metric not in self.data:
            known = ", ".join(sorted(self.data)) or "none yet"
            raise ValueError(f"metric={metric!r} was never logged; logged metrics: {known}")
        return self.data[metric]
