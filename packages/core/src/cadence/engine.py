"""`Engine`: runs the matched methods, then the callbacks, on each event.

Dispatch lists are computed once per event (methods filtered by their declared ``events``
and sorted by ``order``), so the per-batch cost of an idle method is one ``match`` call, and
an event that nothing handles costs the Trainer two dict reads (`Engine.run_planned`).
Which methods may run together is checked in `cadence._composition` (re-exported here).
"""

from __future__ import annotations

import atexit
import logging
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

from cadence._composition import DeclaredMethod, MethodConflictError, check_composition, check_declarations
from cadence._traces import NO_TRACES, LazyTraces, Trace, Traces
from cadence.algorithm import Algorithm, DuckTypedAlgorithm, as_algorithm
from cadence.callback import Callback
from cadence.event import Event
from cadence.loggers.destination import LoggerDestination
from cadence.loggers.logger import Logger
from cadence.state import State

__all__ = [
    "DeclaredMethod",
    "Engine",
    "MethodConflictError",
    "MethodError",
    "Trace",
    "Traces",
    "check_composition",
    "check_declarations",
]

_log = logging.getLogger(__name__)


class MethodError(RuntimeError):
    """An exception raised inside a method or callback, re-raised with its name and the event."""

    def __init__(self, owner: str, event: Event, error: BaseException):
        self.owner = owner
        self.event = event
        super().__init__(f"{owner} failed on event {event.value!r}: {type(error).__name__}: {error}")


class Engine:
    """Runs methods and callbacks on events.

    ``Engine(state, logger)`` is Composer's signature: the methods and callbacks are ``state.algorithms``
    and ``state.callbacks``. ``Engine(state, algorithms=[...], callbacks=[...])`` sets them first, for a
    hand-written loop; ``engine.run_event("after_dataloader")`` accepts event names as strings.

    On INIT the log destinations run first, then the other callbacks, then the methods (as in Composer),
    so a destination is ready before anything logs; on every other event the methods run first, then the
    callbacks, then the destinations. `close` ends the engine: callbacks are closed, and a callback still
    open in a live engine cannot start in another one. An engine nobody closed closes the callbacks it
    started when it is garbage-collected or the interpreter exits (Composer's behaviour).
    """

    def __init__(
        self,
        state: State,
        logger: Logger | None = None,
        *,
        algorithms: Sequence[Algorithm] | None = None,
        callbacks: Sequence[Callback] | None = None,
    ):
        if logger is not None and not isinstance(logger, Logger):
            raise TypeError(
                f"Engine's second argument is the Logger (Composer's Engine(state, logger)), got "
                f"{type(logger).__name__}; pass methods as Engine(state, algorithms=[...])"
            )
        self.state = state
        if algorithms is not None:
            state.algorithms = list(algorithms)
        if callbacks is not None:
            state.callbacks = list(callbacks)
        self.logger = logger if logger is not None else Logger(state)
        self._algorithm_plan: dict[Event, list[Algorithm]] = {}
        self._callback_plan: dict[Event, list[tuple[Callback, Any]]] = {}  # (callback, its handler of the event)
        self._planned_algorithms: Sequence[Algorithm] = ()  # copies of the lists the plan was made from
        self._planned_callbacks: Sequence[Callback] = ()
        self._opened: list[Callback] = []  # the callbacks this engine started on INIT
        self._closed = False
        self.refresh()

    # Planning ---------------------------------------------------------------------
    def refresh(self) -> None:
        """Recompute which method and callback runs on which event, in which order."""
        algorithms, callbacks = self.state.algorithms, self.state.callbacks
        check_composition(algorithms)
        views = [as_algorithm(a) for a in algorithms]  # a duck-typed method through its DuckTypedAlgorithm
        ranked = sorted(views, key=lambda algorithm: algorithm.order)  # stable
        for event in Event:
            candidates = [a for a in ranked if not a.events or event in a.events]
            self._algorithm_plan[event] = candidates[::-1] if event.runs_methods_in_reverse else candidates
            ordered = _callback_order(event, [c for c in callbacks if c.handles(event)])
            self._callback_plan[event] = [(callback, callback.handler(event)) for callback in ordered]
        self._planned_algorithms, self._planned_callbacks = _snapshot(algorithms), _snapshot(callbacks)
        self._trace_names = {id(a): f"{a!r}/" for a in views}  # repr once per plan, not once per event

    def plan(self, event: Event | str) -> list[Algorithm]:
        """The methods that may run on `event`, in the order they would run (as listed in ``state.algorithms``)."""
        self._check_plan(refuse_closed=False)
        return [_listed(algorithm) for algorithm in self._algorithm_plan[Event(event)]]

    def describe(self) -> str:
        """A printable table of which method may run on which event, in order."""
        self._check_plan(refuse_closed=False)
        lines = ["event                 methods (in run order) | callbacks"]
        for event in Event:
            methods = [_described(a) for a in self._algorithm_plan[event]]
            callbacks = [type(c).__name__ for c, _ in self._callback_plan[event]]
            if methods or callbacks:
                lines.append(f"{event.value:<21} {', '.join(methods) or '-'} | {', '.join(callbacks) or '-'}")
        if len(lines) == 1:
            lines.append("(no methods or callbacks)")
        return "\n".join(lines)

    # Running ----------------------------------------------------------------------
    # The hot path: ~13 events per batch, through `run_planned` in the Trainer. An idle event costs two dict
    # reads; a matched method its `match` and `apply` calls (its `Trace` is built only if read); a callback one call.
    def run_event(self, event: Event | str) -> Traces:
        """Run the methods matched on `event` (in plan order) and the callbacks that handle it.

        On INIT the callbacks run first (destinations before the others), then the methods. Returns
        the methods that ran, with what their ``apply`` returned (Composer's traces).
        """
        if event.__class__ is not Event:
            event = Event(event)
        if event is Event.INIT:
            self._ensure_open()
            _claim(self)
            self.run_callbacks(event)
            return self.run_algorithms(event)
        state = self.state  # `_check_plan`'s test, inlined: a hand-written loop runs a dozen events per batch here
        if self._closed or state.algorithms != self._planned_algorithms or state.callbacks != self._planned_callbacks:
            self._check_plan()
        return self.run_planned(event)

    def run_planned(self, event: Event) -> Traces:
        """`run_event` for a loop's per-batch events (the Trainer's step and evaluation): the plan is checked after
        a method or callback ran rather than before every event, so an event that nothing handles costs two dict
        reads (a dozen events run per batch, most of them idle).

        During a run, what changes ``state.algorithms`` or ``state.callbacks`` is a method or a callback, and the
        next event sees the new plan either way. A loop that edits the lists itself between two events calls
        `run_event` for the second, which checks first (the Trainer does at each epoch's start). Not for INIT,
        which `run_event` runs in its own order.
        """
        algorithms, callbacks = self._algorithm_plan[event], self._callback_plan[event]
        if not algorithms and not callbacks:
            return NO_TRACES
        traces = self._apply(event, algorithms) if algorithms else NO_TRACES
        state, logger = self.state, self.logger
        for callback, handler in callbacks:
            try:
                handler(state, logger)
            except Exception as error:
                raise MethodError(type(callback).__name__, event, error) from error
        # what ran may have changed the lists or closed this engine: `_check_plan`'s test, inlined (the hot path)
        if self._closed or state.algorithms != self._planned_algorithms or state.callbacks != self._planned_callbacks:
            self._check_plan()
        return traces

    def run_algorithms(self, event: Event | str) -> Traces:
        """Only the methods' part of `event` (the trainer writes checkpoints between the two parts)."""
        if event.__class__ is not Event:
            event = Event(event)
        self._check_plan()
        algorithms = self._algorithm_plan[event]
        return self._apply(event, algorithms) if algorithms else NO_TRACES

    def run_callbacks(self, event: Event | str) -> None:
        """Only the callbacks' part of `event`."""
        if event.__class__ is not Event:
            event = Event(event)
        self._check_plan()
        state, logger = self.state, self.logger
        for callback, handler in self._callback_plan[event]:
            try:
                handler(state, logger)
            except Exception as error:
                raise MethodError(type(callback).__name__, event, error) from error

    def _check_plan(self, refuse_closed: bool = True) -> None:
        """Refuse a closed engine (to run events); replan if ``state.algorithms`` or ``state.callbacks`` changed
        since the plan was made: replaced, resized, or an item replaced in place (each is compared, by identity
        first, with a copy kept from planning)."""
        state = self.state
        if self._closed or state.algorithms != self._planned_algorithms or state.callbacks != self._planned_callbacks:
            if refuse_closed:
                self._ensure_open()
            self.refresh()

    def _apply(self, event: Event, algorithms: list[Algorithm]) -> Traces:
        state, logger = self.state, self.logger
        ran: list[tuple[Algorithm, Any]] | None = None
        for algorithm in algorithms:
            if algorithm.match(event, state):
                try:
                    exit_code = algorithm.apply(event, state, logger)
                except Exception as error:
                    raise MethodError(algorithm.name, event, error) from error
                if ran is None:
                    ran = []
                ran.append((algorithm, exit_code))
        return NO_TRACES if ran is None else LazyTraces(event, ran, self._trace_names)

    def check_applicable(self, batch: Any) -> None:
        """Ask every method whether it can work on the model with batches like `batch` (before any runs).

        Raises the first method's `NotApplicableError`, whose message names the method and the fix.
        """
        for algorithm in self.state.algorithms:
            as_algorithm(algorithm).check_applicable(self.state.model, batch)

    def close(self) -> None:
        """End the engine: every callback's ``close``, then ``post_close`` for those whose close worked.

        Idempotent. A failing callback never stops the others from closing: its error becomes a
        warning. After this, running an event raises RuntimeError.
        """
        if self._closed:
            return
        self._closed = True
        state, logger = self.state, self.logger
        closed = [callback for callback in state.callbacks if _attempt(callback, "close", state, logger)]
        for callback in closed:
            _attempt(callback, "post_close")
        _release(self)

    def __del__(self) -> None:
        """An engine nobody closed closes when it is garbage-collected, as in Composer: the callbacks it started
        (and no other engine took over) get ``close`` and ``post_close``; failures are logged, never raised."""
        if not _EXITING and not getattr(self, "_closed", True):  # False until __init__ got that far
            self._close_started()

    def _close_started(self) -> None:
        """Close the callbacks this engine started, quietly (garbage collection and interpreter exit)."""
        self._closed = True
        state, logger = self.state, self.logger
        mine = [callback for callback in self._opened if _owner_or_none(callback) in (None, self)]
        closed = [callback for callback in mine if _attempt(callback, "close", state, logger, quiet=True)]
        for callback in closed:
            _attempt(callback, "post_close", quiet=True)
        _release(self)

    @property
    def closed(self) -> bool:
        """True once `close` ran: the engine runs no more events."""
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "this Engine was closed (Trainer.close() or Engine.close()) and cannot run events again; "
                "create a new Trainer (or Engine)"
            )


def _snapshot(items: Sequence[Any]) -> Sequence[Any]:
    """A copy of a list of methods or callbacks that compares equal to it until it changes (a tuple is its own)."""
    return list(items) if isinstance(items, list) else items


def _listed(algorithm: Algorithm) -> Any:
    """The object the user listed: a duck-typed method rather than its `DuckTypedAlgorithm` view."""
    return algorithm.wrapped if isinstance(algorithm, DuckTypedAlgorithm) else algorithm


def _described(algorithm: Algorithm) -> str:
    if isinstance(algorithm, DuckTypedAlgorithm):
        return f"{algorithm.name}(match decides; effects undeclared)"
    return algorithm.name if algorithm.events else f"{algorithm.name}(match decides)"


def _callback_order(event: Event, callbacks: list[Callback]) -> list[Callback]:
    """Composer's order: log destinations first on INIT (so they are ready), last on every other event
    (so they see what the other callbacks logged); the user's order otherwise."""
    destinations: list[Callback] = [c for c in callbacks if isinstance(c, LoggerDestination)]
    others = [c for c in callbacks if not isinstance(c, LoggerDestination)]
    return destinations + others if event is Event.INIT else others + destinations


def _attempt(callback: Callback, name: str, *args: Any, quiet: bool = False) -> bool:
    """Call ``callback.<name>(*args)``; a failure becomes a warning (a log record when `quiet`) and False."""
    try:
        getattr(callback, name)(*args)
    except Exception as error:  # closing must reach every callback
        message = f"{type(callback).__name__}.{name}() failed: {type(error).__name__}: {error}"
        if quiet:  # garbage collection or interpreter exit: nobody to warn
            _log.error(message)
        else:
            warnings.warn(message, stacklevel=3)
        return False
    return True


# The callbacks started by a live engine and not closed yet: id(callback) -> that engine. An entry whose
# engine was closed or garbage-collected is stale (its callbacks are free again).
_OPEN_CALLBACKS: dict[int, weakref.ref[Engine]] = {}


def _owner_or_none(callback: Callback) -> Engine | None:
    """The engine that claimed `callback` last, if it is still alive (closed or not)."""
    ref = _OPEN_CALLBACKS.get(id(callback))
    return ref() if ref is not None else None


def _owner(callback: Callback) -> Engine | None:
    """The live, unclosed engine that started `callback`, if any."""
    ref = _OPEN_CALLBACKS.get(id(callback))
    engine = ref() if ref is not None else None
    if engine is None or engine._closed or not any(c is callback for c in engine._opened):
        return None
    return engine


def _claim(engine: Engine) -> None:
    """On INIT: refuse a callback still open in another engine (its state belongs to that run), then
    mark this engine's callbacks open."""
    for callback in engine.state.callbacks:
        owner = _owner(callback)
        if owner is not None and owner is not engine:
            raise RuntimeError(
                "Cannot create a new trainer with an open callback or logger from a previous trainer: "
                f"{type(callback).__name__} is still open in a previous Trainer (or Engine); a callback or "
                "logger cannot serve two runs at once. Call trainer.close() on the previous trainer before "
                "creating this one, or pass a new instance"
            )
    for callback in engine.state.callbacks:
        if not any(c is callback for c in engine._opened):
            engine._opened.append(callback)
        _OPEN_CALLBACKS[id(callback)] = weakref.ref(engine)
    _STARTED_ENGINES.add(engine)
    for key in [key for key, ref in _OPEN_CALLBACKS.items() if ref() is None]:
        del _OPEN_CALLBACKS[key]


def _release(engine: Engine) -> None:
    for callback in engine._opened:
        if _OPEN_CALLBACKS.get(id(callback)) is not None and _OPEN_CALLBACKS[id(callback)]() is engine:
            del _OPEN_CALLBACKS[id(callback)]
    engine._opened.clear()


# Engines that ran INIT, for the exit hook (weak: an engine still closes when it is garbage-collected).
_STARTED_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
_EXITING = False  # set by the exit hook: from then on Python is shutting down and __del__ closes nothing


def _close_at_exit() -> None:
    """Composer closes every engine still open when the interpreter exits; so does cadence."""
    global _EXITING
    for engine in list(_STARTED_ENGINES):
        if not engine._closed:
            engine._close_started()
    _EXITING = True


atexit.register(_close_at_exit)
