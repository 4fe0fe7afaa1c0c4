"""`MLFlowLogger`: the facade over the collector, the sender and the spill store; see the package docstring."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from cadence.loggers import LoggerDestination, failure_kind

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State
from cadence.loggers.mlflow.collector import Collector
from cadence.loggers.mlflow.connect import open_run
from cadence.loggers.mlflow.limits import MAX_METRICS_PER_REQUEST, STATUSES
from cadence.loggers.mlflow.record import RunRecord
from cadence.loggers.mlflow.sender import Sender
from cadence.loggers.mlflow.spill import _Artifact
from cadence.loggers.mlflow.spill_writer import SpillWriter
from cadence.loggers.mlflow.state import Notices, RunTarget, Shared
from cadence.loggers.mlflow.store import _sqlite_uri

_T = TypeVar("_T")


class _OnRun(Generic[_T]):
    """An attribute of the logger kept on its `RunTarget`, where the collector, sender and spill read it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, logger: Any, owner: type | None = None) -> Any:
        return self if logger is None else getattr(logger._run, self._name)

    def __set__(self, logger: Any, value: _T) -> None:
        setattr(logger._run, self._name, value)


class MLFlowLogger(LoggerDestination):
    """Logs params, metrics, tags and artifacts of one run to MLflow.

    Args:
        experiment_name: the experiment, created when missing (ignored when `run_id` is given).
        run_name: the run's name (default: the trainer's ``run_name`` at ``fit_start``).
        tracking_uri: where runs go; default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
            current folder.
        tags: tags of the run.
        run_id: attach to this existing run (resume) instead of creating one.
        flush_interval_s: how often points are sent (sooner when a full request is pending).
        spill_dir: where undeliverable data goes (default ``./mlflow-spill``).
        connect_timeout_s: how long ``__init__`` waits for a remote server before logging offline.
        finish_timeout_s: how long ``finish`` (and ``flush()`` without a timeout) try to deliver.
        max_backoff_s: the longest wait between two retries during an outage.
        max_buffered_points: points kept in memory; beyond that the oldest are spooled to disk.

    Only the process with ``RANK`` 0 (or without ``RANK``) creates a run; on other ranks the
    logger does nothing and ``run_id`` is None.
    """

    experiment_name = _OnRun[str]()
    run_name = _OnRun[str | None]()
    tracking_uri = _OnRun[str]()
    spill_dir = _OnRun[Path]()
    flush_interval_s = _OnRun[float]()
    finish_timeout_s = _OnRun[float]()
    max_backoff_s = _OnRun[float]()
    max_buffered_points = _OnRun[int]()
    offline = _OnRun[bool]()
    run_id = _OnRun[str | None]()
    experiment_id = _OnRun[str | None]()
    stats = _OnRun[dict[str, int]]()

    def __init__(
        self,
        experiment_name: str = "cadence",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, str] | None = None,
        run_id: str | None = None,
        flush_interval_s: float = 2.0,
        spill_dir: str | Path | None = None,
        *,
        connect_timeout_s: float = 30.0,
        finish_timeout_s: float = 30.0,
        max_backoff_s: float = 30.0,
        max_buffered_points: int = 200_000,
    ):
        try:
            import mlflow  # noqa: F401  (imported here so that `import cadence` never imports mlflow)
        except ImportError as err:
            raise ImportError("MLFlowLogger needs mlflow: pip install mlflow") from err
        for name, value in (
            ("flush_interval_s", flush_interval_s),
            ("connect_timeout_s", connect_timeout_s),
            ("finish_timeout_s", finish_timeout_s),
            ("max_backoff_s", max_backoff_s),
        ):
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}={value!r} must be a number > 0")
        if not isinstance(max_buffered_points, int) or max_buffered_points < 100:
            raise ValueError(f"max_buffered_points={max_buffered_points!r} must be an int >= 100")

        self._run = RunTarget(
            experiment_name,
            run_name,
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or _sqlite_uri(Path("mlflow.db")),
            Path(spill_dir if spill_dir is not None else "mlflow-spill").resolve(),
            float(flush_interval_s),
            float(finish_timeout_s),
            float(max_backoff_s),
            max_buffered_points,
        )
        # Caller-side state: only the caller's thread touches it
        self._finished = False
        self._finish_lock = threading.Lock()
        self._named = False
        self._attached = run_id is not None
        self._notices = Notices()
        self._record = RunRecord(self._notices)
        self._inert = os.environ.get("RANK", "0").strip() not in ("", "0")
        if self._inert:
            return

        self._shared = Shared()
        self._staging = Path(tempfile.mkdtemp(prefix="cadence-mlflow-"))  # copies of artifacts, params.json
        self._staged = 0
        self._spill = SpillWriter(self._run, self._shared, self._notices, self._record, self._staging)
        self._collector = Collector(self._run, self._shared, self._notices, self._attached, self._spill.prepare)
        self._sender = Sender(self._run, self._shared, self._notices, self._record, self._staging, self._spill.prepare)
        user_tags = self._record.add_tags(tags or {})
        try:
            connection = open_run(self._run, run_id, user_tags, connect_timeout_s, self._spill, self._notices)
        except BaseException:
            shutil.rmtree(self._staging, ignore_errors=True)
            raise
        if connection is not None:  # on the server (a resumed run continues where it stopped)
            self._collector.last_step.update(connection.latest_steps)
            self._record.params.update(connection.params)
            if run_id is not None:  # mark the new segment of a resumed run, and send the tags it was given
                segment = int(connection.tags.get("cadence.segments", "1") or 1) + 1
                self.set_tags(
                    {"cadence.segments": segment, f"cadence.segment.{segment}.start_ms": int(time.time() * 1000)}
                )
                with self._shared.lock:  # already sanitised: not through set_tags again
                    self._shared.pending_tags.update(user_tags)

        self._collector.start()
        self._sender.start()
        self._atexit = functools.partial(_finish_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    @property
    def spill_uri(self) -> str:
        return self._run.spill_uri

    # Logging API (caller's thread) --------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Queue the values and return; tensors are read back to the host in the background."""
        if self._finished or self._inert:
            if self._finished and not self._inert:
                self._notices.warn_once(
                    "finished", "", f"MLFlowLogger of run {self.run_id} is finished; metrics are ignored"
                )
            return
        timestamp = int(time.time() * 1000)
        inbox = self._shared.inbox
        append = inbox.append
        for key, value in metrics.items():
            append((key, value.detach() if isinstance(value, torch.Tensor) else value, step, timestamp))
        if len(inbox) >= MAX_METRICS_PER_REQUEST:
            self._shared.collect_wake.set()
        if self._notices.deferred:
            self._notices.emit()

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Log params: nested mappings flattened to ``a/b`` keys, values as stable strings.

        Values over MLflow's length limit are truncated (the full values go to the
        ``cadence/params.json`` artifact, hashed in the ``cadence.params_sha256`` tag). Logging
        a param again with the same value does nothing; a different value warns and is not sent
        (MLflow params are immutable).
        """
        if self._inert or self._finished:
            return
        new, changed = self._record.add_params(params, self.run_id)
        with self._shared.lock:
            self._record.all_params.update(changed)
            self._shared.pending_params.update(new)
            self._shared.params_json_dirty = self._shared.params_json_dirty or bool(changed)
        self._shared.send_wake.set()
        self._notices.emit()

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags of the run (values as stable strings, cut to 5000 characters)."""
        if self._inert or self._finished:
            return
        new = self._record.add_tags(tags)
        with self._shared.lock:
            self._shared.pending_tags.update(new)
        self._shared.send_wake.set()

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Upload a file or folder as ``name`` (a path inside the run's artifacts; default: its own name).

        The file is copied now, so it may change or disappear afterwards; the upload happens
        in the background.
        """
        if self._inert or self._finished:
            return
        source = Path(path)
        target = (name or source.name).replace("\\", "/").strip("/")
        artifact_dir, _, base = target.rpartition("/")
        self._staged += 1
        staged = self._staging / f"{self._staged:05d}" / base
        try:
            staged.parent.mkdir(parents=True)
            if source.is_dir():
                shutil.copytree(source, staged)
            else:
                shutil.copy2(source, staged)
        except OSError as err:
            self._notices.warn(f"artifact {str(source)!r} is not logged: {err}")
            return
        with self._shared.lock:
            self._shared.artifacts.append(_Artifact(staged, artifact_dir or None))
        self._shared.send_wake.set()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Deliver everything logged so far; True when all of it was delivered.

        With a timeout, wait at most that long (retrying at once through an outage). Without
        one, wait up to ``finish_timeout_s``, except during an outage: then return False at
        once and keep everything buffered, so that the end of ``fit`` is never held up.
        """
        if self._inert:
            return True
        self._notices.emit()
        if self._finished:
            return self._shared.terminated
        return self._sender.flush(timeout_s)

    def finish(
        self, status: str = "FINISHED", error: BaseException | None = None, *, timeout_s: float | None = None
    ) -> None:
        """Deliver what is left, end the run with `status` (FINISHED, FAILED or KILLED); idempotent.

        Tries for up to `timeout_s` (default ``finish_timeout_s``); what is still undelivered
        then goes to the local spill store, with one warning that says how to import it. An
        `error` is recorded in the tags ``cadence.error`` (its message) and ``cadence.failure``
        (``oom`` for out-of-memory errors, else the exception's class name).
        """
        status = str(status).upper()
        if status not in STATUSES:
            raise ValueError(f"status={status!r} must be one of {', '.join(STATUSES)}")
        if self._inert:
            return
        if error is not None:
            self.set_tags({"cadence.error": _error_message(error), "cadence.failure": failure_kind(error)})
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        with contextlib.suppress(Exception):
            atexit.unregister(self._atexit)
        try:
            self._end_run(status, self.finish_timeout_s if timeout_s is None else timeout_s)
        except Exception as err:  # finishing must never raise into the caller
            self._notices.warn(f"finishing MLflow run {self.run_id} failed: {err!r}")
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)

    def _end_run(self, status: str, timeout_s: float) -> None:
        """Let the sender end the run; stop both threads; spill whatever was not confirmed by the deadline."""
        deadline = time.monotonic() + timeout_s
        end_ms = int(time.time() * 1000)
        if self._shared.struggling(slow_s=0.5):
            self._spill.prepare()
        delivered = self._sender.terminate(status, end_ms, deadline)
        self._shared.close()
        self._collector.join(timeout=5.0)
        self._notices.emit()
        if delivered and self._shared.terminated:
            if self.offline:
                self._notices.warn(
                    f"MLflow run {self.run_id} was logged offline to {self.spill_uri}; import it into "
                    f"{self.tracking_uri} with:\n    {self._run.import_hint}"
                )
            return
        self._collector.collect(lock_timeout_s=5.0)  # what the collector had not picked up yet
        self._spill.spill(status, end_ms, timeout_s)
        self._notices.emit()

    # Trainer callbacks and checkpoints ----------------------------------------------------------
    def close(self, state: State, logger: Logger) -> None:
        if not self._finished:
            self.finish("FINISHED")

    def state_dict(self) -> dict[str, Any]:
        """The run's identity, saved in checkpoints: read it back with `resume_run_id` to continue the run."""
        if self._inert or self.run_id is None:
            return {}
        return {"run_id": self.run_id, "experiment_id": self.experiment_id, "tracking_uri": self.tracking_uri}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loading a checkpoint of another run does not switch runs; it is recorded in a tag."""
        previous = state.get("run_id")
        if previous and previous != self.run_id and not self._inert:
            self.set_tags({"cadence.loaded_checkpoint_of_run": previous})

    def fit_start(self, state: State, logger: Logger) -> None:
        """Name the run after the trainer's ``run_name`` unless it was named (or attached) explicitly."""
        if self._inert or self._named:
            return
        self._named = True
        if not self._attached and self.run_name is None:
            self.set_tags({"mlflow.runName": state.run_name})


def _error_message(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error)).strip()[-4000:]


def _finish_at_exit(ref: weakref.ReferenceType[MLFlowLogger]) -> None:
    logger = ref()
    if logger is None or logger._finished:
        return
    error = getattr(sys, "last_value", None)  # set when the program died of an uncaught exception
    status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED" if error is not None else "FINISHED"
    logger.finish(status)
