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
    if name == "MLFlowLogger":  # imported lazily: mlflow is an optional dependency
        from cadence.loggers.mlflow import MLFlowLogger

        return MLFlowLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
