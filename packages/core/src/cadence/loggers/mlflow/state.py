"""What the logger's parts share: the run they log to, the lock-guarded exchange, and the caller's warnings.

Three threads touch a logger: the caller's (training), the collector and the sender. The
caller appends to `Shared.inbox` without a lock; everything else in `Shared` is guarded by
`Shared.lock`. `RunTarget` is filled in while the logger is constructed, before the threads
start, and only read afterwards (but for `stats`). `Notices` is how warnings reach the caller.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadence.loggers.mlflow.limits import MLflowLoggerWarning
from cadence.loggers.mlflow.spill import _SPILL_DB, IMPORT_COMMAND, _Artifact
from cadence.loggers.mlflow.store import _sqlite_uri

_log = logging.getLogger(__name__)


Point = tuple[str, float, int, int]  # (key, value, timestamp, step), as MLflow stores a metric point


class RunTarget:
    """The run every part logs to (its store, client and ids) and the logger's settings."""

    def __init__(self, experiment_name: str, run_name: str | None, tracking_uri: str, spill_dir: Path,
                 flush_interval_s: float, finish_timeout_s: float, max_backoff_s: float,
                 max_buffered_points: int):  # fmt: skip
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri
        self.spill_dir = spill_dir
        self.flush_interval_s = flush_interval_s
        self.finish_timeout_s = finish_timeout_s
        self.max_backoff_s = max_backoff_s
        self.max_buffered_points = max_buffered_points
        self.offline = False  # the run lives in the spill store
        self.client: Any = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.stats: dict[str, int] = {  # counters for monitoring and tests
            "requests": 0,
            "failed_requests": 0,
            "delivered_points": 0,
            "dropped_points": 0,
            "spooled_points": 0,
            "spilled_points": 0,
        }

    @property
    def spill_uri(self) -> str:
        return _sqlite_uri(self.spill_dir / _SPILL_DB)

    @property
    def import_hint(self) -> str:
        return f"{IMPORT_COMMAND} {self.spill_dir} --tracking-uri {self.tracking_uri}"

    @property
    def spool_folder(self) -> Path:
        return self.spill_dir / "spool" / str(self.run_id)

    def spool_meta(self) -> dict[str, Any]:
        return {
            "tracking_uri": self.tracking_uri,
            "run_id": self.run_id,
            "experiment_name": self.experiment_name,
            "offline": self.offline,
        }


class Shared:
    """The exchange between the caller, the collector and the sender: guarded by `lock`, but for `inbox`.

    Data flows inbox -> pending (the oldest to spool files beyond the bound) -> a request;
    a point is forgotten only once a request carrying it is acknowledged. `cv` is notified
    whenever something a waiter (flush, finish) may wait for has changed.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.collect_wake = threading.Event()
        self.send_wake = threading.Event()
        # Data on its way
        self.inbox: deque[tuple[Any, Any, Any, int]] = deque()  # (name, value, step, timestamp)
        self.collecting = False  # the collector holds points taken from the inbox
        self.pending: deque[Point] = deque()
        self.spool_files: deque[Path] = deque()
        self.spool_offset = 0  # bytes of spool_files[0] already delivered
        self.inflight: list[Point] | None = None  # the metric request in progress
        self.pending_params: dict[str, str] = {}
        self.pending_tags: dict[str, str] = {}
        self.artifacts: list[_Artifact] = []
        self.params_json_dirty = False
        # Sending
        self.flush_requests = 0  # flush() calls waiting
        self.finishing = False
        self.draining = False  # sending pending points back to back
        self.last_flush = time.monotonic()
        self.terminate: tuple[str, int] | None = None  # (status, end ms) once finish asks for it
        self.terminated = False
        self.closed = False  # both threads stop
        # Outage
        self.failures = 0  # consecutive failed requests
        self.next_attempt = 0.0
        self.last_error = ""
        self.request_started = 0.0  # when the request in progress began (0: none)
        self.dead: str | None = None  # why the run cannot take data any more

    def idle(self) -> bool:
        """Everything logged so far is delivered (call with `lock` held)."""
        return not (
            self.inbox
            or self.collecting
            or self.pending
            or self.spool_files
            or self.pending_params
            or self.pending_tags
            or self.artifacts
            or self.params_json_dirty
            or self.inflight is not None
        )

    def urgent(self) -> bool:
        return bool(self.flush_requests) or self.finishing

    def struggling(self, slow_s: float = 1.0) -> bool:
        """The server is failing, gone, or has not answered the request in progress for `slow_s`."""
        started = self.request_started
        return bool(self.failures or self.dead or (started and time.monotonic() - started > slow_s))

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        with self.cv:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cv.wait(min(remaining, 0.05))
            return True

    def wake(self) -> None:
        self.collect_wake.set()
        self.send_wake.set()

    def close(self) -> None:
        """Stop both threads: the collector after one last pass, the sender after its current request."""
        with self.lock:
            self.closed = True
            self.cv.notify_all()
        self.wake()


class Notices:
    """Warnings for the caller, as `MLflowLoggerWarning`; those of the background threads wait for its next call."""

    def __init__(self) -> None:
        self.deferred: deque[str] = deque()
        self._warned: set[tuple[str, str]] = set()

    def warn(self, message: str) -> None:
        """Warn on the caller's thread; a warnings filter set to "error" must not raise into training."""
        try:
            warnings.warn(message, MLflowLoggerWarning, stacklevel=_outside_level())
        except Exception:
            _log.warning("%s", message)

    def warn_once(self, kind: str, key: str, message: str) -> None:
        if (kind, key) not in self._warned:
            self._warned.add((kind, key))
            self.warn(message)

    def defer(self, message: str) -> None:
        """Called from the background threads: the warning is issued at the caller's next call."""
        self.deferred.append(message)

    def emit(self) -> None:
        while self.deferred:
            try:
                message = self.deferred.popleft()
            except IndexError:
                return
            self.warn(message)


_PACKAGE = str(Path(__file__).parent) + os.sep


def _outside_level() -> int:
    """The `stacklevel` of the first frame outside this package, so that a warning points at the caller's code."""
    frame, level = sys._getframe(2), 2  # level 1 is `Notices.warn`, level 2 its caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
