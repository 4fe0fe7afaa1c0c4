"""`Sender`: the thread that delivers the run's data, and rides out outages."""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cadence.loggers.mlflow.delivery import Delivery, _SendError
from cadence.loggers.mlflow.limits import MAX_METRICS_PER_REQUEST, _fit_metrics, _fit_params_tags
from cadence.loggers.mlflow.record import RunRecord
from cadence.loggers.mlflow.spill import PARAMS_ARTIFACT, TAG_PARAMS_HASH, _Artifact, _read_spool
from cadence.loggers.mlflow.state import Notices, Point, RunTarget, Shared
from cadence.loggers.mlflow.store import _classify, _short

_log = logging.getLogger(__name__)


class Sender:
    """Delivers params and tags, then spooled and pending points, then artifacts, then ends the run.

    One request at a time, within MLflow's limits; points are sent every ``flush_interval_s``,
    or back to back while a full request is pending or someone waits (flush, finish). A
    failure is retried with exponential backoff for as long as the run lasts (at most 1 s
    apart while someone waits). A point is forgotten only when a request carrying it is
    acknowledged. If the run is gone ("run" errors), nothing more is sent: finish spills.
    """

    def __init__(self, run: RunTarget, shared: Shared, notices: Notices, record: RunRecord, staging: Path,
                 prepare_spill: Callable[[], None]):  # fmt: skip
        self._run, self._shared, self._notices, self._record = run, shared, notices, record
        self._staging = staging
        self._prepare_spill = prepare_spill
        self._delivery = Delivery(run, shared, notices)
        self._thread = threading.Thread(target=self._main, name="cadence-mlflow-send", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # Caller's thread ----------------------------------------------------------------------------
    def flush(self, timeout_s: float | None) -> bool:
        """Wait until everything logged so far is delivered (see `MLFlowLogger.flush`)."""
        shared = self._shared
        with shared.lock:
            if shared.dead:
                return False
            if timeout_s is None and shared.struggling(slow_s=5.0):
                return False
            shared.flush_requests += 1
            shared.next_attempt = min(shared.next_attempt, time.monotonic())
        try:
            shared.wake()
            deadline = time.monotonic() + (self._run.finish_timeout_s if timeout_s is None else timeout_s)
            delivered = shared.wait(lambda: shared.idle() or shared.dead is not None, deadline) and shared.dead is None
            if not delivered and shared.struggling(slow_s=0.5):
                self._prepare_spill()
            return delivered
        finally:
            with shared.lock:
                shared.flush_requests -= 1
            self._notices.emit()

    def terminate(self, status: str, end_ms: int, deadline: float) -> bool:
        """Deliver everything, then end the run; False if neither that nor the run's death happened by `deadline`."""
        shared = self._shared
        with shared.lock:
            shared.finishing = True
            shared.terminate = (status, end_ms)
            shared.next_attempt = min(shared.next_attempt, time.monotonic())
        shared.wake()
        return shared.wait(lambda: shared.terminated or shared.dead is not None, deadline)

    # Sender thread ------------------------------------------------------------------------------
    def _main(self) -> None:
        shared = self._shared
        while True:
            shared.send_wake.wait(self._timeout())
            shared.send_wake.clear()
            if shared.closed:
                return
            try:
                while not shared.closed and self._send_one():
                    pass
            except Exception:
                _log.exception("cadence: the MLflow sender failed; retrying")
                with shared.lock:
                    self._note_failure(RuntimeError("sender error"))

    def _timeout(self) -> float:
        shared, interval = self._shared, self._run.flush_interval_s
        now = time.monotonic()
        with shared.lock:
            if shared.failures:
                wait = shared.next_attempt - now
            elif shared.pending:
                wait = shared.last_flush + interval - now
            else:
                wait = interval
            for artifact in shared.artifacts:
                wait = min(wait, artifact.next_try - now)
        return min(max(wait, 0.005), interval)

    def _send_one(self) -> bool:
        """Do one request if one is due; True if another may follow right away."""
        shared = self._shared
        now = time.monotonic()
        with shared.lock:
            if shared.dead or shared.closed or (shared.failures and now < shared.next_attempt):
                return False
            if shared.pending_params or shared.pending_tags:
                params, tags = list(shared.pending_params.items()), list(shared.pending_tags.items())
                n_params, n_tags = _fit_params_tags(params, tags)
                return self._send_params_tags(params[:n_params], tags[:n_tags])
            if shared.spool_files:
                return self._send_spooled()
            pending = shared.pending
            due = shared.urgent() or shared.draining or len(pending) >= MAX_METRICS_PER_REQUEST
            if pending and (due or now >= shared.last_flush + self._run.flush_interval_s):
                shared.draining = True
                count = _fit_metrics(pending[i] for i in range(min(len(pending), MAX_METRICS_PER_REQUEST)))
                return self._send_metrics([pending.popleft() for _ in range(count)])
            if shared.draining:
                shared.draining = False
                shared.last_flush = now
            for artifact in shared.artifacts:
                if artifact.next_try <= now:
                    return self._send_artifact(artifact)
            if shared.params_json_dirty:
                return self._send_params_json()
            if shared.terminate is not None and shared.idle():
                return self._send_terminate(*shared.terminate)
            return False

    # Each _send_* is called with the shared lock held; the request itself runs without it.
    def _send_params_tags(self, params: list[tuple[str, str]], tags: list[tuple[str, str]]) -> bool:
        err = self._delivery.params_tags(params, tags)
        if err is not None:
            return self._handle(err)
        shared = self._shared
        for key, value in params:
            if shared.pending_params.get(key) == value:
                del shared.pending_params[key]
        for key, value in tags:
            if shared.pending_tags.get(key) == value:
                del shared.pending_tags[key]
        return self._handle(None)

    def _send_metrics(self, chunk: list[Point]) -> bool:
        shared = self._shared
        shared.inflight = chunk  # finish spills it if it gives up while the request is under way
        try:
            self._delivery.points(chunk)
        except _SendError as failed:
            shared.pending.extendleft(reversed(failed.unsent))
            if shared.closed:  # finish gave up: the points are spilled, from here or from `inflight`
                return False
            return self._handle(failed.cause, failed.kind)
        finally:
            shared.inflight = None
        return self._handle(None)

    def _send_spooled(self) -> bool:
        shared = self._shared
        path = shared.spool_files[0]
        points, end = _read_spool(path, shared.spool_offset, MAX_METRICS_PER_REQUEST)
        points = points[: _fit_metrics(points)] if points else points
        if not points:
            shared.spool_files.popleft()
            shared.spool_offset = 0
            with contextlib.suppress(OSError):
                path.unlink()
            return True
        _, end = _read_spool(path, shared.spool_offset, len(points))
        try:  # the points stay in the spool file until delivered (no `inflight` copy)
            self._delivery.points(points)
        except _SendError as failed:
            if shared.closed:
                return False
            return self._handle(failed.cause, failed.kind)
        if not shared.closed:
            shared.spool_offset = end
        return self._handle(None)

    def _send_artifact(self, artifact: _Artifact) -> bool:
        shared = self._shared
        err = self._delivery.artifact(artifact)
        if err is None:
            if artifact in shared.artifacts:
                shared.artifacts.remove(artifact)
            shutil.rmtree(artifact.local.parent, ignore_errors=True)
            return True
        artifact.attempts += 1
        artifact.next_try = time.monotonic() + min(self._run.max_backoff_s, 0.5 * 2 ** min(artifact.attempts, 20))
        if artifact.attempts == 1:
            _log.warning("cadence: uploading %s to MLflow failed (%s); retrying", artifact.local.name, err)
        shared.cv.notify_all()
        return True

    def _send_params_json(self) -> bool:
        shared = self._shared
        shared.params_json_dirty = False
        path = self._staging / "params" / Path(PARAMS_ARTIFACT).name
        shared.pending_tags[TAG_PARAMS_HASH] = self._record.write_params_json(path)
        err = self._delivery.params_json(path)
        if err is not None:
            shared.params_json_dirty = True
            return self._handle(err, "transient" if _classify(err) == "item" else None)
        return self._handle(None)

    def _send_terminate(self, status: str, end_ms: int) -> bool:
        err = self._delivery.terminate(status, end_ms)
        if err is None:
            self._shared.terminated = True
            self._shared.cv.notify_all()
            return False
        return self._handle(err)

    # Outage state (called with the shared lock held) ---------------------------------------------
    def _handle(self, err: BaseException | None, kind: str | None = None) -> bool:
        if err is None:
            self._note_success()
            return True
        kind = kind or _classify(err)
        if kind == "run":
            self._note_dead(err)
        else:
            self._note_failure(err)
        self._shared.cv.notify_all()
        return False

    def _note_failure(self, err: BaseException) -> None:
        shared, run = self._shared, self._run
        run.stats["failed_requests"] += 1
        shared.failures += 1
        shared.last_error = _short(err)
        cap = min(run.max_backoff_s, 1.0) if shared.urgent() else run.max_backoff_s
        delay = min(cap, 0.25 * 2 ** min(shared.failures - 1, 20)) * random.uniform(0.5, 1.0)
        shared.next_attempt = time.monotonic() + delay
        if shared.failures == 1:
            _log.warning("cadence: MLflow tracking at %s failed (%s); buffering and retrying", run.tracking_uri, err)
            self._prepare_spill()

    def _note_success(self) -> None:
        shared = self._shared
        if shared.failures:
            _log.warning("cadence: MLflow tracking at %s answers again after %d failed attempts",
                         self._run.tracking_uri, shared.failures)  # fmt: skip
        shared.failures = 0
        shared.cv.notify_all()

    def _note_dead(self, err: BaseException) -> None:
        shared, run = self._shared, self._run
        shared.dead = _short(err)
        self._notices.defer(
            f"MLflow run {run.run_id} at {run.tracking_uri} no longer accepts data ({shared.dead}); what is not "
            f"delivered yet is written to the local spill store {run.spill_uri} when the run finishes"
        )
        shared.cv.notify_all()
