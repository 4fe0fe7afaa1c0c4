"""cadence: train faster by composing algorithmic speed-up methods.

The core: `Trainer`, `Event`, `State`, `Engine`, `Algorithm`, `Callback`, `Time`, `Model`.
Methods live in their own packages (``pip install cadence-mixup``) and appear under
`cadence.algorithms` and `cadence.functional` once installed.
"""

from typing import TYPE_CHECKING

from cadence._snapshot import CheckpointMismatchError
from cadence.algorithm import Algorithm, Effects, NotApplicableError, Resource
from cadence.callback import Callback
from cadence.checkpoint import CheckpointError
from cadence.distributed import exit_without_finalization
from cadence.engine import Engine, MethodConflictError, MethodError
from cadence.event import Event
from cadence.loggers import ConsoleLogger, InMemoryLogger, Logger, LoggerDestination
from cadence.models import (
    Classifier,
    ComposerClassifier,
    ComposerModel,
    Model,
    soft_cross_entropy,
)
from cadence.precision import Precision
from cadence.state import State
from cadence.time import Time, Timestamp, TimeUnit, ensure_time
from cadence.trainer import Trainer, seed_all

if TYPE_CHECKING:  # type checkers see the lazy attribute's class (`__getattr__` imports it on first use)
    from cadence.models.huggingface import HuggingFaceModel

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "Callback",
    "CheckpointError",
    "CheckpointMismatchError",
    "Classifier",
    "ComposerClassifier",
    "ComposerModel",
    "ConsoleLogger",
    "Effects",
    "Engine",
    "Event",
    "HuggingFaceModel",
    "InMemoryLogger",
    "Logger",
    "LoggerDestination",
    "MethodConflictError",
    "MethodError",
    "Model",
    "NotApplicableError",
    "Precision",
    "Resource",
    "State",
    "Time",
    "TimeUnit",
    "Timestamp",
    "Trainer",
    "ensure_time",
    "exit_without_finalization",
    "seed_all",
    "soft_cross_entropy",
]


def __getattr__(name: str) -> object:
    """`HuggingFaceModel` imports transformers' helpers on first use, never on ``import cadence``."""
    if name == "HuggingFaceModel":
        from cadence.models.huggingface import HuggingFaceModel

        return HuggingFaceModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
