"""`Sender`: the thread that makes the requests to the run, and rides out outages."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable

from cadence_mlflow.names import LEGACY_MAX_PARAM_VALUE_LENGTH as LEGACY
from cadence_mlflow.names import Point, truncate
from cadence_mlflow.outbox import Outbox, Request
from cadence_mlflow.tracking import Run, classify, short, upload_artifact

_log = logging.getLogger(__name__)


class _Undelivered(Exception):
    """A point request failed other than by its content; `unsent` are the points it did not deliver."""

    def __init__(self, kind: str, cause: BaseException, unsent: list[Point]):
        super().__init__(str(cause))
        self.kind, self.cause, self.unsent = kind, cause, unsent


class Sender:
    """Sends the outbox's requests to `run`, one at a time, and tells the outbox how each went.

    What the server refuses as content (an "item" error) is isolated by sending smaller parts
    and dropped with a warning, so one bad value never holds up the rest. A request is resent
    unchanged after any other failure, when the outbox's backoff allows: MLflow's SQL stores
    deduplicate the metric rows of a request that failed after the server wrote part of it.
    If the run is gone ("run" errors), nothing more is sent: finish spills. No lock is held
    while a request is under way.
    """

    def __init__(self, outbox: Outbox, run: Run, report: Callable[[str], None], *, tracking_uri: str,
                 spill_uri: str, on_outage: Callable[[], None]):  # fmt: skip
        self._outbox, self._run, self._report = outbox, run, report
        self._tracking_uri, self._spill_uri, self._on_outage = tracking_uri, spill_uri, on_outage
        self.stats = {"requests": 0, "failed_requests": 0, "delivered_points": 0, "dropped_points": 0}
        self._thread = threading.Thread(target=self._main, name="cadence-mlflow-send", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        outbox = self._outbox
        while True:
            outbox.wait_for_send()
            if outbox.closed:
                return
            try:
                while not outbox.closed and self._send_one():
                    pass
            except Exception:
                _log.exception("cadence: the MLflow sender failed; retrying")
                self._failed(RuntimeError("sender error"))

    def _send_one(self) -> bool:
        """Make the request that is due, if any; True if another may follow right away."""
        request = self._outbox.next_request()
        if request is None:
            return False
        if request.kind in ("metrics", "spooled"):
            try:
                self._points(request.points)
            except _Undelivered as failed:
                if not self._outbox.undelivered(request, failed.unsent):
                    return False  # finish gave up: the points are spilled
                return self._failed(failed.cause, failed.kind)
            return self._delivered(request)
        if request.kind == "params_tags":
            err = self._params_tags(request.params, request.tags)
        elif request.kind == "end":
            status, end_ms = request.end
            err = self._call(lambda: self._run.client.set_terminated(self._run.run_id, status, end_time=end_ms))
        else:
            return self._upload(request)
        if err is not None:
            return self._failed(err)
        return self._delivered(request) and request.kind != "end"

    def _call(self, fn: Callable[[], object]) -> BaseException | None:
        """``fn()``, one call to the server; the error it raised, if any."""
        try:
            with self._outbox.in_request():
                fn()
            return None
        except Exception as err:
            return err
        finally:
            self.stats["requests"] += 1

    # Requests -----------------------------------------------------------------------------------
    def _params_tags(self, params: list[tuple[str, str]], tags: list[tuple[str, str]]) -> BaseException | None:
        """Send params and tags; if refused, one at a time (a long param again cut to the old servers' limit)."""
        from mlflow.entities import Param, RunTag

        run = self._run

        def send(ps: list[tuple[str, str]], ts: list[tuple[str, str]]) -> BaseException | None:
            return self._call(
                lambda: run.client.log_batch(
                    run.run_id, params=[Param(k, v) for k, v in ps], tags=[RunTag(k, v) for k, v in ts]
                )
            )

        err = send(params, tags)
        if err is None or classify(err) != "item":
            return err
        for kind, items in (("param", params), ("tag", tags)):  # find and drop what the server refuses
            for key, value in items:
                single = send([(key, value)], []) if kind == "param" else send([], [(key, value)])
                if single is not None and kind == "param" and classify(single) == "item" and len(value) > LEGACY:
                    single = send([(key, truncate(value, LEGACY))], [])
                if single is not None and classify(single) != "item":
                    return single
                if single is not None:
                    self._report(f"MLflow refused {kind} {key!r}={value[:200]!r}: {short(single)}")
        return None

    def _points(self, points: list[Point]) -> None:
        """Send points, isolating and dropping the ones the server refuses; raises _Undelivered otherwise."""
        from mlflow.entities import Metric

        run = self._run
        err = self._call(
            lambda: run.client.log_batch(run.run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in points])
        )
        if err is None:
            self.stats["delivered_points"] += len(points)
            return
        kind = classify(err)
        if kind != "item":
            raise _Undelivered(kind, err, points)
        if len(points) == 1:
            self.stats["dropped_points"] += 1
            self._report(f"MLflow refused metric point {points[0]}: {short(err)}")
            return
        middle = len(points) // 2
        try:
            self._points(points[:middle])
        except _Undelivered as failed:
            raise _Undelivered(failed.kind, failed.cause, failed.unsent + points[middle:]) from None
        self._points(points[middle:])

    def _upload(self, request: Request) -> bool:
        artifact = request.artifact
        assert artifact is not None
        err = self._call(lambda: upload_artifact(self._run.client, self._run.run_id, artifact))
        if err is None:
            self._outbox.delivered(request)
            shutil.rmtree(artifact.local.parent, ignore_errors=True)
        elif self._outbox.artifact_failed(artifact) == 1:
            _log.warning("cadence: uploading %s to MLflow failed (%s); retrying", artifact.local.name, err)
        return True

    # Outcomes -----------------------------------------------------------------------------------
    def _delivered(self, request: Request) -> bool:
        failures = self._outbox.delivered(request)
        if failures:
            _log.warning("cadence: MLflow tracking at %s answers again after %d failed attempts",
                         self._tracking_uri, failures)  # fmt: skip
        return True

    def _failed(self, err: BaseException, kind: str | None = None) -> bool:
        if (kind or classify(err)) == "run":
            reason = self._outbox.lost_run(err)
            self._report(
                f"MLflow run {self._run.run_id} at {self._tracking_uri} no longer accepts data ({reason}); what is "
                f"not delivered yet is written to the local spill store {self._spill_uri} when the run finishes"
            )
            return False
        self.stats["failed_requests"] += 1
        if self._outbox.failed(err) == 1:
            _log.warning("cadence: MLflow tracking at %s failed (%s); buffering and retrying", self._tracking_uri, err)
            self._on_outage()
        return False
