"""Loggers: the `Logger` facade and its destinations (in-memory, console; MLflow from ``cadence-mlflow``)."""

from typing import Any

from cadence.loggers.console import ConsoleLogger
from cadence.loggers.destination import STATUSES, LoggerDestination
from cadence.loggers.in_memory import InMemoryLogger
from cadence.loggers.logger import Destination, Logger, failure_kind

__all__ = [
    "STATUSES",
    "ConsoleLogger",
    "Destination",
    "InMemoryLogger",
    "Logger",
    "LoggerDestination",
    "MLFlowLogger",
    "failure_kind",
]


def __getattr__(name: str) -> Any:
    if name == "MLFlowLogger":  # from the separate package cadence-mlflow, imported lazily (it needs mlflow)
        try:
            from cadence_mlflow import MLFlowLogger
        except ModuleNotFoundError as err:
            if err.name != "cadence_mlflow":
                raise
            raise ImportError(
                "MLFlowLogger lives in the package cadence-mlflow, which is not installed: "
                "pip install 'cadence[mlflow]' (or pip install cadence-mlflow)",
                name=__name__,
            ) from err
        return MLFlowLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
