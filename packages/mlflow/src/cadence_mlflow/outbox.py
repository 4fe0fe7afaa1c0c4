"""`Outbox`: the run's data on its way, and how delivery goes; the exchange between the logger's three threads.

The caller queues (`put_metrics`, `add_params`, `add_tags`, `add_artifact`) and waits (`start_waiting`,
`wait_delivered`, `request_end`, `wait_ended`); the collector turns the inbox into points (`take_inbox`,
`add_points`); the sender takes one request at a time (`next_request`) and says how it went (`delivered`,
`undelivered`, `failed`, `artifact_failed`, `lost_run`). One lock, the outbox's own, guards everything
but the inbox (a deque the caller appends to without it); no request is ever made while it is held.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cadence_mlflow.names import MAX_METRICS_PER_REQUEST, Point
from cadence_mlflow.spill import SpoolFiles
from cadence_mlflow.tracking import Artifact, fit_metrics, fit_params_tags, short


@dataclass
class Request:
    """One request for the sender; `kind` is "params_tags", "spooled", "metrics", "artifact" or "end"."""

    kind: str
    params: list[tuple[str, str]] = field(default_factory=list)
    tags: list[tuple[str, str]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    artifact: Artifact | None = None
    end: tuple[str, int] = ("", 0)  # (status, end time in ms)
    spool_offset: int = 0  # where the spool is delivered to once this request is


class Outbox:
    """A run's data on its way to MLflow, and the health of delivery.

    Data flows inbox -> pending points (beyond ``max_buffered_points`` the oldest to the spool
    files) -> requests: params and tags, then spooled points, then pending points (every
    ``flush_interval_s``, back to back while a full request is pending or someone waits), then
    artifacts, then the end of the run. A point is forgotten only once a request carrying it is
    acknowledged. The health of delivery (consecutive failures and when to retry, with exponential
    backoff; the last error; how long the request under way has taken; whether the run is gone) is
    what flush, finish and the collector decide by.
    """

    def __init__(self, spool: SpoolFiles, report: Callable[[str], None], *, tracking_uri: str,
                 flush_interval_s: float, max_buffered_points: int, max_backoff_s: float):  # fmt: skip
        self._spool, self._report, self._tracking_uri = spool, report, tracking_uri
        self._interval, self._bound, self._max_backoff = flush_interval_s, max_buffered_points, max_backoff_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified whenever a waiter may be done
        self._collect_wake, self._send_wake = threading.Event(), threading.Event()
        self.stats = {"spooled_points": 0, "dropped_points": 0}
        # Data on its way
        self._inbox: deque[tuple[Any, Any, Any, int]] = deque()  # (name, value, step, timestamp)
        self._collecting = False  # the collector holds points taken from the inbox
        self._pending: deque[Point] = deque()
        self._inflight: list[Point] | None = None  # the metric request under way
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._artifacts: list[Artifact] = []
        # Schedule and lifecycle
        self._waiting = 0  # flush() calls waiting
        self._end: tuple[str, int] | None = None  # (status, end ms) once finish asks for it
        self._ended = self._closed = False
        self._draining = False  # sending pending points back to back
        self._last_flush = time.monotonic()
        # Health
        self._failures = 0  # consecutive failed requests
        self._retry_at = 0.0
        self._last_error = ""
        self._request_started = 0.0  # when the request under way began (0: none)
        self._dead: str | None = None  # why the run cannot take data any more

    @property
    def ended(self) -> bool:
        """The run was ended on the server."""
        return self._ended

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dead(self) -> str | None:
        return self._dead

    @property
    def last_error(self) -> str:
        return self._last_error

    def struggling(self, slow_s: float = 1.0) -> bool:
        """The server is failing, gone, or has not answered the request under way for `slow_s`."""
        started = self._request_started
        return bool(self._failures or self._dead or (started and time.monotonic() - started > slow_s))

    # The caller's thread --------------------------------------------------------------------------
    def put_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        timestamp = int(time.time() * 1000)
        append = self._inbox.append
        for key, value in metrics.items():  # a tensor that needs no gradient is kept as is: detach() is an operation
            if isinstance(value, torch.Tensor) and value.requires_grad:
                value = value.detach()
            append((key, value, step, timestamp))
        if len(self._inbox) >= MAX_METRICS_PER_REQUEST:
            self._collect_wake.set()

    def add_params(self, params: Mapping[str, str]) -> None:
        with self._lock:
            self._params.update(params)
        self._send_wake.set()

    def add_tags(self, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._tags.update(tags)
        self._send_wake.set()

    def add_artifact(self, artifact: Artifact) -> None:
        """Queue an upload; it replaces an upload to the same path not sent yet."""
        with self._lock:
            self._artifacts = [a for a in self._artifacts if a.target != artifact.target] + [artifact]
        self._send_wake.set()

    def start_waiting(self, patient: bool) -> bool:
        """A flush waits: send at once, retry sooner. False (no wait) if the run is gone, or if an
        impatient flush would wait through an outage."""
        with self._lock:
            if self._dead or (not patient and self.struggling(slow_s=5.0)):
                return False
            self._waiting += 1
            self._retry_at = min(self._retry_at, time.monotonic())
        self._wake()
        return True

    def stop_waiting(self) -> None:
        with self._lock:
            self._waiting -= 1

    def wait_delivered(self, deadline: float) -> bool:
        """Wait until everything queued so far is delivered; False if not by `deadline` (or the run is gone)."""
        return self._wait(lambda: self._idle() or self._dead is not None, deadline) and self._dead is None

    def request_end(self, status: str, end_ms: int) -> None:
        """Deliver everything, then end the run with `status`."""
        with self._lock:
            self._end = (status, end_ms)
            self._retry_at = min(self._retry_at, time.monotonic())
        self._wake()

    def wait_ended(self, deadline: float) -> bool:
        """Wait until the run is ended on the server, or gone; False if neither happened by `deadline`."""
        return self._wait(lambda: self._ended or self._dead is not None, deadline)

    def close(self) -> None:
        """Stop both threads: the collector after one last pass, the sender after its current request."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._wake()

    def take_undelivered(self) -> tuple[list[Point], list[Artifact]]:
        """Everything not confirmed as delivered (the request under way included), for the spill."""
        with self._lock:
            points = list(self._inflight or [])
            points.extend(self._spool.read_all())
            points.extend(self._pending)
            self._pending.clear()
            return points, list(self._artifacts)

    # The collector ------------------------------------------------------------------------------
    def wait_for_collect(self, timeout: float) -> None:
        self._collect_wake.wait(timeout)
        self._collect_wake.clear()

    def take_inbox(self) -> list[tuple[Any, Any, Any, int]]:
        """Everything logged since the last call; `done_collecting` must follow."""
        with self._lock:
            self._collecting = True
            return [self._inbox.popleft() for _ in range(len(self._inbox))]

    def add_points(self, points: list[Point]) -> None:
        with self._lock:
            self._pending.extend(points)
            if len(self._pending) > self._bound:
                self._spool_oldest(len(self._pending) - self._bound // 2)
            due = len(self._pending) >= MAX_METRICS_PER_REQUEST or self._urgent()
        if due:
            self._send_wake.set()

    def done_collecting(self) -> None:
        with self._lock:
            self._collecting = False
            self._changed.notify_all()

    # The sender ---------------------------------------------------------------------------------
    def wait_for_send(self) -> None:
        """Sleep until a request may be due."""
        now, interval = time.monotonic(), self._interval
        with self._lock:
            if self._failures:
                wait = self._retry_at - now
            elif self._pending:
                wait = self._last_flush + interval - now
            else:
                wait = interval
            for artifact in self._artifacts:
                wait = min(wait, artifact.next_try - now)
        self._send_wake.wait(min(max(wait, 0.005), interval))
        self._send_wake.clear()

    def next_request(self) -> Request | None:
        """The request due now, if any."""
        now = time.monotonic()
        with self._lock:
            if self._dead or self._closed or (self._failures and now < self._retry_at):
                return None
            if self._params or self._tags:
                params, tags = list(self._params.items()), list(self._tags.items())
                n_params, n_tags = fit_params_tags(params, tags)
                return Request("params_tags", params=params[:n_params], tags=tags[:n_tags])
            spooled, offset = self._spool.next_chunk()
            if spooled:  # the points stay in the spool file until delivered (no `inflight` copy)
                return Request("spooled", points=spooled, spool_offset=offset)
            pending = self._pending
            due = self._urgent() or self._draining or len(pending) >= MAX_METRICS_PER_REQUEST
            if pending and (due or now >= self._last_flush + self._interval):
                self._draining = True
                count = fit_metrics(pending[i] for i in range(min(len(pending), MAX_METRICS_PER_REQUEST)))
                self._inflight = [pending.popleft() for _ in range(count)]  # finish spills it if it gives up
                return Request("metrics", points=self._inflight)
            if self._draining:
                self._draining, self._last_flush = False, now
            for artifact in self._artifacts:
                if artifact.next_try <= now:
                    return Request("artifact", artifact=artifact)
            if self._end is not None and self._idle():
                return Request("end", end=self._end)
            return None

    @contextlib.contextmanager
    def in_request(self) -> Iterator[None]:
        """Around each call to the server, so that `struggling` sees a request that hangs."""
        with self._lock:
            self._request_started = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._request_started = 0.0

    def delivered(self, request: Request) -> int:
        """Forget what `request` carried; returns how many consecutive failures this success ends."""
        with self._lock:
            if request.kind == "params_tags":
                for pending, items in ((self._params, request.params), (self._tags, request.tags)):
                    for key, value in items:
                        if pending.get(key) == value:  # not changed meanwhile
                            del pending[key]
            elif request.kind == "spooled" and not self._closed:  # once closed, finish has spilled the spool
                self._spool.advance(request.spool_offset)
            elif request.kind == "metrics":
                self._inflight = None
            elif request.kind == "artifact" and request.artifact in self._artifacts:
                self._artifacts.remove(request.artifact)
            elif request.kind == "end":
                self._ended = True
            failures, self._failures = self._failures, 0
            self._changed.notify_all()
            return failures

    def undelivered(self, request: Request, unsent: list[Point]) -> bool:
        """Keep the `unsent` points of a failed point request; False once closed (finish spills them)."""
        with self._lock:
            if request.kind == "metrics":
                self._pending.extendleft(reversed(unsent))
                self._inflight = None
            return not self._closed

    def failed(self, err: BaseException) -> int:
        """A request failed: retry with exponential backoff (at most 1 s apart while someone waits).

        Returns the number of consecutive failures."""
        with self._lock:
            self._failures += 1
            self._last_error = short(err)
            cap = min(self._max_backoff, 1.0) if self._urgent() else self._max_backoff
            delay = min(cap, 0.25 * 2 ** min(self._failures - 1, 20)) * random.uniform(0.5, 1.0)
            self._retry_at = time.monotonic() + delay
            self._changed.notify_all()
            return self._failures

    def artifact_failed(self, artifact: Artifact) -> int:
        """An upload failed: retry it later, with its own backoff; returns its number of attempts."""
        with self._lock:
            artifact.attempts += 1
            artifact.next_try = time.monotonic() + min(self._max_backoff, 0.5 * 2 ** min(artifact.attempts, 20))
            self._changed.notify_all()
            return artifact.attempts

    def lost_run(self, err: BaseException) -> str:
        """The run takes no more data: nothing more is sent, finish spills the rest. Returns why."""
        with self._lock:
            self._dead = short(err)
            self._changed.notify_all()
            return self._dead

    # Under the lock -----------------------------------------------------------------------------
    def _idle(self) -> bool:
        """Everything queued so far is delivered."""
        return not (self._inbox or self._collecting or self._pending or self._spool or self._params or self._tags
                    or self._artifacts or self._inflight is not None)  # fmt: skip

    def _urgent(self) -> bool:
        return bool(self._waiting) or self._end is not None

    def _wait(self, done: Callable[[], bool], deadline: float) -> bool:
        with self._changed:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.05))
            return True

    def _wake(self) -> None:
        self._collect_wake.set()
        self._send_wake.set()

    def _spool_oldest(self, count: int) -> None:
        points = [self._pending.popleft() for _ in range(count)]
        try:
            self._spool.write(points)
        except OSError as err:
            self.stats["dropped_points"] += len(points)
            self._report(
                f"{len(points)} metric points could not be spooled to {self._spool.folder} and are lost: {err}"
            )
            return
        self.stats["spooled_points"] += len(points)
        if self.stats["spooled_points"] == len(points):
            self._report(
                f"MLflow tracking at {self._tracking_uri} is not keeping up ({self._last_error or 'slow'}); more "
                f"than {self._bound} points were pending, so the oldest are spooled to {self._spool.folder} and sent "
                f"when the server answers again"
            )
