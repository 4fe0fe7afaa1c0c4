"""`Algorithm`: the base class of every speed-up method.

A method is ``match(event, state) -> bool`` plus ``apply(event, state, logger)``, as in
Composer. cadence adds three declarations the engine uses before training starts:

* ``events``: the events on which ``match`` may return True. The engine consults ``match``
  only on those (cheaper dispatch) and prints them in its plan. Leave it empty to be asked
  on every event.
* ``order``: the nesting position. Lower values wrap higher ones: they run earlier on
  ``BEFORE_*``/start events and later on ``AFTER_*`` events. A method that must see the raw
  batch first on ``AFTER_DATALOADER`` therefore takes a *high* order (it sits closest to the
  data loader). Ties keep the user's list order.
* ``effects()``: what the method reads and writes, which writes it must own alone, and named
  conflicts. Two methods that claim the same resource exclusively are rejected together, and
  so are two instances of one class that writes something (MixUp twice would mix twice),
  unless the class sets ``allow_duplicates = True``.
* ``check_applicable(model, batch)``: whether the method can work on this model and these
  batches. The trainer asks on the first training batch, before any method runs; the harness
  asks before training starts. A method card's *applicability* line is what this checks.

As in Composer, an object that does not subclass `Algorithm` also runs if it has callable
``match(event, state)`` and ``apply(event, state, logger)`` (a ``unittest.mock.Mock`` will do). It
declares nothing, so the engine treats it conservatively; `DuckTypedAlgorithm` says how.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from cadence.event import Event

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["Algorithm", "DuckTypedAlgorithm", "Effects", "NotApplicableError", "Resource", "as_algorithm"]
__all__ += ["has_algorithm_hooks"]


class NotApplicableError(ValueError):
    """A method cannot work on this model or these batches; raised before training starts, with the fix."""


class Resource(str, Enum):
    """The parts of a training run a method can touch."""

    INPUTS = "batch inputs"
    TARGETS = "targets"
    LOSS = "loss"
    MODEL = "model structure"
    WEIGHTS = "model weights"
    GRADIENTS = "gradients"
    OPTIMIZER = "optimizer"
    SCHEDULE = "schedule"
    DATA = "data pipeline"
    DURATION = "run length"
    """Read by a method whose behaviour at a step follows the elapsed fraction of the run (``max_duration``):
    progressive resizing's sizes, layer freezing's schedule. Such a method behaves differently in a run of
    another length, so one cyclic run (Portes et al. 2022) cannot stand for its runs of shorter budgets."""


@dataclass(frozen=True)
class Effects:
    """What a method touches.

    Attributes:
        reads: resources the method reads.
        writes: resources the method changes.
        exclusive: resources the method must be the only one to claim, each with a short
            phrase saying what it does to it (e.g. ``{Resource.LOSS: "interpolates the loss"}``).
        conflicts: other methods (by class name) this one cannot run with, each with the fix.
    """

    reads: AbstractSet[Resource] = frozenset()  # any set given; a frozenset once built
    writes: AbstractSet[Resource] = frozenset()
    exclusive: Mapping[Resource, str] = field(default_factory=dict)
    conflicts: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", frozenset(Resource(r) for r in self.reads))
        object.__setattr__(self, "writes", frozenset(Resource(r) for r in self.writes))
        exclusive = {Resource(r): what for r, what in dict(self.exclusive).items()}
        object.__setattr__(self, "exclusive", exclusive)
        object.__setattr__(self, "writes", self.writes | frozenset(exclusive))


class Algorithm(ABC):
    """Base class for speed-up methods. Subclasses implement `match` and `apply`."""

    events: ClassVar[tuple[Event, ...]] = ()
    order: ClassVar[int] = 0
    allow_duplicates: ClassVar[bool] = False
    """Whether a run may list several instances of this class (only matters if it writes something)."""

    @abstractmethod
    def match(self, event: Event, state: State) -> bool:
        """Return True to run `apply` on this event."""

    @abstractmethod
    def apply(self, event: Event, state: State, logger: Logger) -> int | None:
        """Change the state. Called only when `match` returned True.

        What it returns (Composer's optional exit code) is kept in the engine's traces
        (`Engine.run_event` returns them); methods usually return None.
        """

    def effects(self) -> Effects:
        """What this method reads and writes. Override; the default declares nothing."""
        return Effects()

    def check_applicable(self, model: Any, batch: Any) -> None:
        """Raise `NotApplicableError` if this method cannot work on `model` with batches like `batch`.

        `batch` is a training batch as the data loader yields it (on the training device),
        before any method has changed it. The message names the method, what does not fit
        and the fix (e.g. the ``target_key`` to pass). The default accepts everything.
        """
        del model, batch

    @property
    def find_unused_parameters(self) -> bool:
        """True if the method leaves some parameters without gradients in a step (DDP must know)."""
        return False

    @property
    def backwards_create_graph(self) -> bool:
        """True if the method needs ``loss.backward(create_graph=True)`` (higher-order gradients)."""
        return False

    @staticmethod
    def required_on_load() -> bool:
        """True for methods (model surgery) that must run before a checkpoint can be loaded."""
        return False

    def structure_hparams(self) -> dict[str, Any]:
        """The arguments that decide the model's structure (for ``required_on_load`` methods).

        A checkpoint records them and loads only into a run that passes the same ones; arguments
        left out (``strict``, a batch-reshaping factor) may change when a run resumes. All of
        `hparams` unless narrowed.
        """
        return self.hparams()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: generator states, counters, schedules.

        Values must be plain Python data or tensors (checkpoints load with ``weights_only=True``).
        The default, as in Composer, is ``{"repr": repr(self)}``: a method without state is still
        named with its arguments in the checkpoint; `load_state_dict` ignores it.
        """
        return {"repr": repr(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state

    @property
    def name(self) -> str:
        return type(self).__name__

    def hparams(self) -> dict[str, Any]:
        """The constructor's arguments by name, read back from attributes of the same name.

        Used by `repr` and by loggers (the harness logs them as MLflow params). Methods that
        store an argument under another name override this.
        """
        params = inspect.signature(type(self).__init__).parameters
        skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        return {
            name: getattr(self, name)
            for name, param in params.items()
            if name != "self" and param.kind not in skip and hasattr(self, name)
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={_show(value)}" for name, value in self.hparams().items())
        return f"{type(self).__name__}({args})"


def _show(value: Any) -> str:
    """repr() without memory addresses: callables (e.g. batch getter/setter pairs) by qualified name."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__qualname__", type(value).__name__)
    return repr(value)


def has_algorithm_hooks(obj: Any) -> bool:
    """True for what runs as a method: an `Algorithm`, or an instance with callable ``match`` and ``apply``."""
    if isinstance(obj, type):
        return False
    if isinstance(obj, Algorithm):
        return True
    return callable(getattr(obj, "match", None)) and callable(getattr(obj, "apply", None))


def as_algorithm(obj: Any) -> Algorithm:
    """`obj` as the engine and trainer read a method: itself if it is an `Algorithm`, else its `DuckTypedAlgorithm`."""
    return obj if isinstance(obj, Algorithm) else DuckTypedAlgorithm(obj)


class DuckTypedAlgorithm(Algorithm):
    """A Composer-style method that does not subclass `Algorithm` (any object with ``match(event, state)`` and
    ``apply(event, state, logger)``), seen through cadence's declarations.

    It declares nothing, so it is treated conservatively: ``match`` is asked on every event; it has order 0,
    so it keeps its place in the list among the methods of order 0 (and runs reversed on ``AFTER_*`` events
    like every method); its effects are unknown, so no conflict or duplicate check can involve it (the engine
    logs a note and ``Engine.describe()`` marks it). Composer's optional members are used when the object has
    them with the right type: ``find_unused_parameters`` and ``backwards_create_graph`` (only an exact True
    counts, so a ``Mock``'s attributes do not), ``required_on_load()``, ``state_dict()`` (a dict, else its
    repr is saved, as Composer's default) and ``load_state_dict(state)``.
    """

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped

    def match(self, event: Event, state: State) -> bool:
        return self.wrapped.match(event, state)

    def apply(self, event: Event, state: State, logger: Logger) -> int | None:
        return self.wrapped.apply(event, state, logger)

    @property
    def name(self) -> str:
        return type(self.wrapped).__name__

    @property
    def find_unused_parameters(self) -> bool:
        return getattr(self.wrapped, "find_unused_parameters", False) is True

    @property
    def backwards_create_graph(self) -> bool:
        return getattr(self.wrapped, "backwards_create_graph", False) is True

    def required_on_load(self) -> bool:  # type: ignore[override]  # per instance: it asks the wrapped object
        method = getattr(self.wrapped, "required_on_load", None)
        return callable(method) and method() is True

    def hparams(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        method = getattr(self.wrapped, "state_dict", None)
        saved = method() if callable(method) else None
        return saved if isinstance(saved, dict) else {"repr": repr(self.wrapped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        method = getattr(self.wrapped, "load_state_dict", None)
        if callable(method):
            method(state)

    def __repr__(self) -> str:
        return repr(self.wrapped)
