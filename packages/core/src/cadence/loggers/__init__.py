"""Loggers: the `Logger` facade and its destinations (in-memory, console; MLflow from ``cadence-mlflow``).

`TensorboardLogger` and `WandBLogger` are imported on first access, so ``import cadence`` never
imports tensorboard or wandb (install them with ``pip install 'cadence[tensorboard]'`` / ``'cadence[wandb]'``).
"""

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
    "TensorboardLogger",
    "WandBLogger",
    "failure_kind",
]

_LAZY = {"TensorboardLogger": "cadence.loggers.tensorboard", "WandBLogger": "cadence.loggers.wandb"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # their modules import tensorboard / wandb only when a run starts logging
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
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
