"""`Delivery`: the sender's requests to the run, one at a time, with the shared lock released."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadence.loggers.mlflow.limits import LEGACY_MAX_PARAM_VALUE_LENGTH, _truncate
from cadence.loggers.mlflow.spill import PARAMS_ARTIFACT, _Artifact
from cadence.loggers.mlflow.state import Notices, Point, RunTarget, Shared
from cadence.loggers.mlflow.store import _classify, _join, _short


class _SendError(Exception):
    def __init__(self, kind: str, cause: BaseException, unsent: list[Any]):
        super().__init__(str(cause))
        self.kind, self.cause, self.unsent = kind, cause, unsent


class Delivery:
    """The requests to the run: called with `Shared.lock` held, which each releases around its request.

    What the server refuses as content (an "item" error) is isolated by sending smaller parts
    and dropped with a warning, so one bad value never holds up the rest. A request is resent
    unchanged after any other failure: MLflow's SQL stores deduplicate the metric rows of a
    request that failed after the server wrote part of it.
    """

    def __init__(self, run: RunTarget, shared: Shared, notices: Notices):
        self._run, self._shared, self._notices = run, shared, notices

    def call(self, fn: Callable[[], Any]) -> BaseException | None:
        """``fn()`` without the lock; the error it raised, if any."""
        shared = self._shared
        shared.request_started = time.monotonic()
        shared.lock.release()
        try:
            fn()
            return None
        except Exception as err:
            return err
        finally:
            shared.lock.acquire()
            shared.request_started = 0.0
            self._run.stats["requests"] += 1

    def params_tags(self, params: list[tuple[str, str]], tags: list[tuple[str, str]]) -> BaseException | None:
        """Send params and tags; if refused, one at a time (a long param again cut to the old servers' limit)."""
        from mlflow.entities import Param, RunTag

        run = self._run

        def send(ps: list[tuple[str, str]], ts: list[tuple[str, str]]) -> BaseException | None:
            return self.call(
                lambda: run.client.log_batch(
                    run.run_id, params=[Param(k, v) for k, v in ps], tags=[RunTag(k, v) for k, v in ts]
                )
            )

        err = send(params, tags)
        if err is not None and _classify(err) == "item":  # find and drop what the server refuses
            err = None
            for key, value in params:
                single = send([(key, value)], [])
                if single is not None and _classify(single) == "item" and len(value) > LEGACY_MAX_PARAM_VALUE_LENGTH:
                    single = send([(key, _truncate(value, LEGACY_MAX_PARAM_VALUE_LENGTH))], [])
                if single is not None and _classify(single) == "item":
                    self._notices.defer(f"MLflow refused param {key!r}={value[:200]!r}: {_short(single)}")
                elif single is not None:
                    err = single
                    break
            for key, value in tags if err is None else []:
                single = send([], [(key, value)])
                if single is not None and _classify(single) == "item":
                    self._notices.defer(f"MLflow refused tag {key!r}={value[:200]!r}: {_short(single)}")
                elif single is not None:
                    err = single
                    break
        return err

    def points(self, points: list[Point]) -> None:
        """Send points, isolating and dropping the ones the server refuses; raises _SendError otherwise."""
        from mlflow.entities import Metric

        run = self._run
        err = self.call(lambda: run.client.log_batch(run.run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in points]))
        if err is None:
            run.stats["delivered_points"] += len(points)
            return
        kind = _classify(err)
        if kind != "item":
            raise _SendError(kind, err, points)
        if len(points) == 1:
            run.stats["dropped_points"] += 1
            self._notices.defer(f"MLflow refused metric point {points[0]}: {_short(err)}")
            return
        middle = len(points) // 2
        try:
            self.points(points[:middle])
        except _SendError as failed:
            raise _SendError(failed.kind, failed.cause, failed.unsent + points[middle:]) from None
        self.points(points[middle:])

    def artifact(self, artifact: _Artifact) -> BaseException | None:
        run, local = self._run, artifact.local

        def upload() -> None:
            if local.is_dir():
                run.client.log_artifacts(run.run_id, str(local), artifact_path=_join(artifact.artifact_dir, local.name))
            else:
                run.client.log_artifact(run.run_id, str(local), artifact_path=artifact.artifact_dir)

        return self.call(upload)

    def params_json(self, path: Path) -> BaseException | None:
        run, folder = self._run, str(Path(PARAMS_ARTIFACT).parent)
        return self.call(lambda: run.client.log_artifact(run.run_id, str(path), artifact_path=folder))

    def terminate(self, status: str, end_ms: int) -> BaseException | None:
        run = self._run
        return self.call(lambda: run.client.set_terminated(run.run_id, status, end_time=end_ms))
