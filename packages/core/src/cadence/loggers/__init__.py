"""Loggers: the `Logger` facade and its destinations (in-memory, console, TensorBoard, W&B; more as plugins).

`TensorboardLogger` and `WandBLogger` are imported on first access, so ``import cadence`` never
imports tensorboard or wandb (install them with ``pip install 'cadence[tensorboard]'`` / ``'cadence[wandb]'``).

Other destinations are plugins: a package declares its class in the entry-point group
``cadence.loggers`` and it appears here once installed, e.g. ``cadence-mlflow``::

    [project.entry-points."cadence.loggers"]
    MLFlowLogger = "cadence_mlflow:MLFlowLogger"

so ``from cadence.loggers import MLFlowLogger`` works as Composer's does, and the core never imports
the plugin's package (it imports cadence, not the other way round).
"""

from typing import Any

from cadence._plugins import discover, lookup
from cadence.loggers.console import ConsoleLogger
from cadence.loggers.destination import STATUSES, LoggerDestination
from cadence.loggers.in_memory import InMemoryLogger
from cadence.loggers.logger import Destination, Logger, failure_kind

ENTRY_POINT_GROUP = "cadence.loggers"

__all__ = [  # the built-in names; dir() adds the installed plugins
    "ENTRY_POINT_GROUP",
    "STATUSES",
    "ConsoleLogger",
    "Destination",
    "InMemoryLogger",
    "Logger",
    "LoggerDestination",
    "TensorboardLogger",
    "WandBLogger",
    "failure_kind",
]

_LAZY = {"TensorboardLogger": "cadence.loggers.tensorboard", "WandBLogger": "cadence.loggers.wandb"}

# Plugins whose absence deserves the install command (a name, never an import): Composer users expect them here.
_HOMES = {"MLFlowLogger": "cadence-mlflow"}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _LAZY:  # their modules import tensorboard / wandb only when a run starts logging
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    return lookup(ENTRY_POINT_GROUP, "logger", name, __name__, LoggerDestination, __all__, _HOMES)


def __dir__() -> list[str]:
    return sorted({*__all__, *discover(ENTRY_POINT_GROUP, "logger")})
