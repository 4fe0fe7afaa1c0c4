"""`MLFlowLogger`: the logger itself (collector and sender threads); see the package docstring."""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from cadence.loggers.logger import LoggerDestination, failure_kind

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State
from cadence.loggers.mlflow.limits import (
    LEGACY_MAX_PARAM_VALUE_LENGTH,
    MAX_KEY_LENGTH,
    MAX_METRICS_PER_REQUEST,
    MAX_TAG_VALUE_LENGTH,
    STATUSES,
    MLflowLoggerWarning,
    _fit_metrics,
    _fit_params_tags,
    _max_param_value_length,
    _truncate,
)
from cadence.loggers.mlflow.names import _NameMap, flatten_params, stable_str
from cadence.loggers.mlflow.spill import (
    _SPILL_DB,
    IMPORT_COMMAND,
    PARAMS_ARTIFACT,
    TAG_KIND,
    TAG_PARAMS_HASH,
    TAG_TARGET_EXPERIMENT,
    TAG_TARGET_RUN,
    TAG_TARGET_URI,
    _Artifact,
    _read_spool,
    _write_run,
)
from cadence.loggers.mlflow.store import (
    _artifact_location_for,
    _call_with_timeout,
    _classify,
    _ConfigError,
    _error_code,
    _get_or_create_experiment,
    _is_local,
    _join,
    _latest_steps,
    _mlflow_client,
    _short,
    _sqlite_uri,
)

_log = logging.getLogger(__name__)


class _Connection(NamedTuple):
    client: Any
    experiment_id: str
    run_id: str
    params: dict[str, str]
    latest_steps: dict[str, int]
    tags: dict[str, str]


class _SendError(Exception):
    def __init__(self, kind: str, cause: BaseException, unsent: list[Any]):
        super().__init__(str(cause))
        self.kind, self.cause, self.unsent = kind, cause, unsent


_BAD_VALUE = object()


_NOT_SCALAR = object()


def _error_message(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error)).strip()[-4000:]


def _as_float(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return float(value)
    try:
        return float(value)  # NumPy scalars, Decimal, ...
    except (TypeError, ValueError):
        return _BAD_VALUE


def _finish_at_exit(ref: weakref.ReferenceType[MLFlowLogger]) -> None:
    logger = ref()
    if logger is None or logger._finished:
        return
    error = getattr(sys, "last_value", None)  # set when the program died of an uncaught exception
    status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED" if error is not None else "FINISHED"
    logger.finish(status)


# The logger -----------------------------------------------------------------------------------
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

        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or _sqlite_uri(Path("mlflow.db"))
        self.spill_dir = Path(spill_dir if spill_dir is not None else "mlflow-spill").resolve()
        self.flush_interval_s = float(flush_interval_s)
        self.finish_timeout_s = float(finish_timeout_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_buffered_points = max_buffered_points
        self.offline = False
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

        # Caller-side state (no locks needed: only the caller's thread touches it) --------------
        self._finished = False
        self._finish_lock = threading.Lock()
        self._deferred: deque[str] = deque()  # messages from the background threads
        self._warned: set[tuple[str, str]] = set()
        self._param_names = _NameMap("param")
        self._tag_names = _NameMap("tag")
        self._params: dict[str, str] = {}  # what the run holds (or will): key -> value as sent
        self._all_params: dict[str, str] = {}  # key -> full value (the params artifact)
        self._all_tags: dict[str, str] = {}
        self._named = False

        self._inert = os.environ.get("RANK", "0").strip() not in ("", "0")
        if self._inert:
            return

        # Shared state (guarded by _lock) ----------------------------------------------------------
        self._inbox: deque[tuple[Any, Any, Any, int]] = deque()
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._collect_lock = threading.Lock()
        self._collecting = False
        self._pending: deque[tuple[str, float, int, int]] = deque()
        self._pending_params: dict[str, str] = {}
        self._pending_tags: dict[str, str] = {}
        self._artifacts: list[_Artifact] = []
        self._params_json_dirty = False
        self._spool_files: deque[Path] = deque()
        self._spool_offset = 0  # bytes of _spool_files[0] already delivered
        self._spool_seq = 0
        self._inflight: list[tuple[str, float, int, int]] | None = None
        self._terminate: tuple[str, int] | None = None
        self._terminated = False
        self._dead: str | None = None  # why the run cannot take data any more
        self._closed = False
        self._stop_collector = False
        self._flush_requests = 0
        self._finishing = False
        self._failures = 0
        self._next_attempt = 0.0
        self._last_error = ""
        self._request_started = 0.0  # when the request in progress began (0: none)
        self._last_flush = time.monotonic()
        self._draining = False
        # Collector-only state ---------------------------------------------------------------------
        self._metric_names = _NameMap("metric")
        self._last_step: dict[str, int] = {}
        self._warned_keys: set[tuple[str, str]] = set()
        # Spill store ------------------------------------------------------------------------------
        self._spill_lock = threading.Lock()
        self._spill_client_: Any = None
        self._spill_prepared = False
        self._spill_ready: Path | None = None
        self._spill_experiment_id: str | None = None
        self._staging = Path(tempfile.mkdtemp(prefix="cadence-mlflow-"))
        self._staged = 0

        user_tags = {}
        for key, value in (tags or {}).items():
            name, message = self._tag_names(str(key))
            if message:
                self._warn(message)
            user_tags[name] = _truncate(stable_str(value), MAX_TAG_VALUE_LENGTH)
        self._all_tags.update(user_tags)
        self._attached = run_id is not None
        self._finish_timeout_used = self.finish_timeout_s
        self._collect_wake = threading.Event()
        self._send_wake = threading.Event()
        try:
            self._connect(run_id, user_tags, connect_timeout_s)
        except BaseException:
            shutil.rmtree(self._staging, ignore_errors=True)
            raise

        self._collect_interval = max(0.01, min(self.flush_interval_s / 2, 0.5))
        self._collector = threading.Thread(target=self._collector_main, name="cadence-mlflow-collect", daemon=True)
        self._sender = threading.Thread(target=self._sender_main, name="cadence-mlflow-send", daemon=True)
        self._collector.start()
        self._sender.start()
        self._atexit = functools.partial(_finish_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # Construction -------------------------------------------------------------------------------
    def _connect(self, run_id: str | None, tags: dict[str, str], timeout_s: float) -> None:
        uri = self.tracking_uri

        def connect() -> _Connection:
            client = _mlflow_client(uri)
            if run_id is not None:
                run = client.get_run(run_id)
                if run.info.lifecycle_stage != "active":
                    raise _ConfigError(f"MLflow run {run_id} is deleted; restore it or start a new run")
                if run.info.status != "RUNNING":
                    client.update_run(run_id, status="RUNNING")
                return _Connection(
                    client,
                    str(run.info.experiment_id),
                    run_id,
                    dict(run.data.params),
                    _latest_steps(run),
                    run.data.tags,
                )
            experiment_id = _get_or_create_experiment(client, self.experiment_name, _artifact_location_for(uri))
            run = client.create_run(experiment_id, run_name=self.run_name, tags=tags)
            return _Connection(client, experiment_id, run.info.run_id, {}, {}, {})

        def forget(late: _Connection) -> None:  # the run was created after we gave up: hide it
            if run_id is None:
                late.client.delete_run(late.run_id)

        try:
            connection = _call_with_timeout(connect, None if _is_local(uri) else timeout_s, forget)
        except _ConfigError as err:
            raise ValueError(str(err)) from None
        except Exception as err:
            if _error_code(err) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST"):
                raise ValueError(f"MLflow refused the run setup at {uri}: {err}") from err
            self._go_offline(run_id, tags, err)
            return
        self._client = connection.client
        self.experiment_id = connection.experiment_id
        self.run_id = connection.run_id
        self._last_step.update(connection.latest_steps)
        self._params.update(connection.params)
        if run_id is not None:  # mark the new segment of a resumed run
            segment = int(connection.tags.get("cadence.segments", "1") or 1) + 1
            self.set_tags({"cadence.segments": segment, f"cadence.segment.{segment}.start_ms": int(time.time() * 1000)})
            if tags:
                self.set_tags(tags)

    def _go_offline(self, run_id: str | None, tags: dict[str, str], err: BaseException) -> None:
        spill_tags = {
            **tags,
            TAG_KIND: "offline",
            TAG_TARGET_URI: self.tracking_uri,
            TAG_TARGET_EXPERIMENT: self.experiment_name,
            TAG_TARGET_RUN: run_id or "",
        }
        try:
            client, experiment_id = self._spill_client()
            run = client.create_run(experiment_id, run_name=self.run_name, tags=spill_tags)
        except Exception as local_error:
            raise RuntimeError(
                f"MLflow tracking at {self.tracking_uri} could not be reached ({_short(err)}) and the local spill "
                f"store {self.spill_uri} could not be used either ({_short(local_error)})"
            ) from local_error
        self._client, self.offline = client, True
        self.experiment_id, self.run_id = experiment_id, run.info.run_id
        self._warn(
            f"MLflow tracking at {self.tracking_uri} could not be reached ({_short(err)}); this run is logged "
            f"offline to the local MLflow store {self.spill_uri} (run {self.run_id}). Import it when the server "
            f"is reachable with:\n    {self._import_hint}"
        )

    @property
    def _import_hint(self) -> str:
        return f"{IMPORT_COMMAND} {self.spill_dir} --tracking-uri {self.tracking_uri}"

    @property
    def spill_uri(self) -> str:
        return _sqlite_uri(self.spill_dir / _SPILL_DB)

    def _spill_client(self) -> tuple[Any, str]:
        """The local spill store and its experiment (created on first use; thread-safe)."""
        with self._spill_lock:
            if self._spill_client_ is None:
                self.spill_dir.mkdir(parents=True, exist_ok=True)
                database, ready = self.spill_dir / _SPILL_DB, self._spill_ready
                if ready is not None and ready.exists() and not database.exists():
                    shutil.move(ready, database)  # migrated ahead of time by _prepare_spill_store
                client = _mlflow_client(self.spill_uri)
                artifacts = (self.spill_dir / "artifacts").as_uri()
                self._spill_experiment_id = _get_or_create_experiment(client, self.experiment_name, artifacts)
                self._spill_client_ = client
            assert self._spill_experiment_id is not None
            return self._spill_client_, self._spill_experiment_id

    def _prepare_spill_store(self) -> None:
        """Get the spill store ready in the background during an outage, so that `finish` finds it ready.

        A new store is migrated in the private staging folder and moved into ``spill_dir`` only
        if something is spilled, so a run that recovers leaves nothing behind.
        """
        if self.offline or self._spill_prepared:
            return
        self._spill_prepared = True

        def prepare() -> None:
            try:
                with self._spill_lock:
                    if self._spill_client_ is not None:
                        return
                    if not (self.spill_dir / _SPILL_DB).exists():
                        ready = self._staging / _SPILL_DB
                        _mlflow_client(_sqlite_uri(ready)).search_experiments()  # runs MLflow's migrations
                        self._spill_ready = ready
                        return
                self._spill_client()
            except Exception as err:
                _log.warning("cadence: could not prepare the MLflow spill store %s: %s", self.spill_uri, err)

        try:
            threading.Thread(target=prepare, name="cadence-mlflow-spill-prep", daemon=True).start()
        except RuntimeError:  # at interpreter shutdown no thread can start; `_spill` prepares it itself
            self._spill_prepared = False

    # Warnings -----------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        """Warn on the caller's thread; a warnings filter set to "error" must not raise into training."""
        try:
            warnings.warn(message, MLflowLoggerWarning, stacklevel=3)
        except Exception:
            _log.warning("%s", message)

    def _warn_once(self, kind: str, key: str, message: str) -> None:
        if (kind, key) not in self._warned:
            self._warned.add((kind, key))
            self._warn(message)

    def _defer(self, message: str) -> None:
        """Called from the background threads: the warning is issued at the caller's next call."""
        self._deferred.append(message)

    def _emit_deferred(self) -> None:
        while self._deferred:
            try:
                message = self._deferred.popleft()
            except IndexError:
                return
            self._warn(message)

    # Logging API (caller's thread) --------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Queue the values and return; tensors are read back to the host in the background."""
        if self._finished or self._inert:
            if self._finished and not self._inert:
                self._warn_once("finished", "", f"MLFlowLogger of run {self.run_id} is finished; metrics are ignored")
            return
        timestamp = int(time.time() * 1000)
        append = self._inbox.append
        for key, value in metrics.items():
            append((key, value.detach() if isinstance(value, torch.Tensor) else value, step, timestamp))
        if len(self._inbox) >= MAX_METRICS_PER_REQUEST:
            self._collect_wake.set()
        if self._deferred:
            self._emit_deferred()

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Log params: nested mappings flattened to ``a/b`` keys, values as stable strings.

        Values over MLflow's length limit are truncated (the full values go to the
        ``cadence/params.json`` artifact, hashed in the ``cadence.params_sha256`` tag). Logging
        a param again with the same value does nothing; a different value warns and is not sent
        (MLflow params are immutable).
        """
        if self._inert or self._finished:
            return
        flat, duplicates = flatten_params(params)
        for key in duplicates:
            self._warn_once("param-dup", key, f"param {key!r} appears twice after flattening; the first is kept")
        limit = _max_param_value_length()
        new: dict[str, str] = {}
        changed = False
        for raw, value in flat.items():
            key, message = self._param_names(raw)
            if message:
                self._warn_once("param-name", raw, message)
            full = stable_str(value)
            if self._all_params.get(key) != full:
                self._all_params[key] = full
                changed = True
            sent = _truncate(full, limit)
            if sent != full:
                self._warn_once(
                    "param-long",
                    key,
                    f"param {key!r} is {len(full)} characters long, over MLflow's limit of {limit}; it is "
                    f"truncated in the run, and its full value is in the {PARAMS_ARTIFACT} artifact",
                )
            known = self._params.get(key)
            if known is None:
                self._params[key] = sent
                new[key] = sent
            elif known != sent:
                self._warn_once(
                    "param-changed",
                    f"{key}={sent}",
                    f"param {key!r} is already {known[:200]!r} in run {self.run_id}; the new value {sent[:200]!r} "
                    f"is not logged (MLflow params cannot change) but is recorded in {PARAMS_ARTIFACT}",
                )
        with self._lock:
            self._pending_params.update(new)
            self._params_json_dirty = self._params_json_dirty or changed
        self._send_wake.set()
        self._emit_deferred()

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags of the run (values as stable strings, cut to 5000 characters)."""
        if self._inert or self._finished:
            return
        new = {}
        for raw, value in tags.items():
            key, message = self._tag_names(str(raw))
            if message:
                self._warn_once("tag-name", str(raw), message)
            new[key] = _truncate(stable_str(value), MAX_TAG_VALUE_LENGTH)
        self._all_tags.update(new)
        with self._lock:
            self._pending_tags.update(new)
        self._send_wake.set()

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
            self._warn(f"artifact {str(source)!r} is not logged: {err}")
            return
        with self._lock:
            self._artifacts.append(_Artifact(staged, artifact_dir or None))
        self._send_wake.set()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Deliver everything logged so far; True when all of it was delivered.

        With a timeout, wait at most that long (retrying at once through an outage). Without
        one, wait up to ``finish_timeout_s``, except during an outage: then return False at
        once and keep everything buffered, so that the end of ``fit`` is never held up.
        """
        if self._inert:
            return True
        self._emit_deferred()
        if self._finished:
            return self._terminated
        with self._lock:
            if self._dead:
                return False
            if timeout_s is None and self._struggling(slow_s=5.0):
                return False
            self._flush_requests += 1
            self._next_attempt = min(self._next_attempt, time.monotonic())
        try:
            self._collect_wake.set()
            self._send_wake.set()
            deadline = time.monotonic() + (self.finish_timeout_s if timeout_s is None else timeout_s)
            delivered = self._wait(lambda: self._idle() or self._dead is not None, deadline) and self._dead is None
            if not delivered and self._struggling(slow_s=0.5):
                self._prepare_spill_store()
            return delivered
        finally:
            with self._lock:
                self._flush_requests -= 1
            self._emit_deferred()

    def finish(
        self, status: str = "FINISHED", timeout_s: float | None = None, error: BaseException | None = None
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
            self._finish(status, self.finish_timeout_s if timeout_s is None else timeout_s)
        except Exception as err:  # finishing must never raise into the caller
            self._warn(f"finishing MLflow run {self.run_id} failed: {err!r}")
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)

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

    # Collector thread ---------------------------------------------------------------------------
    def _collector_main(self) -> None:
        while True:
            self._collect_wake.wait(self._collect_interval)
            self._collect_wake.clear()
            stop = self._stop_collector
            try:
                self._collect()
                if self._struggling(slow_s=2.0):
                    self._prepare_spill_store()
            except Exception:
                _log.exception("cadence: collecting metrics for MLflow failed")
            if stop:
                return

    def _collect(self, lock_timeout_s: float = -1) -> None:
        if not self._collect_lock.acquire(timeout=lock_timeout_s):
            return
        try:
            with self._lock:
                self._collecting = True
                items = [self._inbox.popleft() for _ in range(len(self._inbox))]
            if not items:
                return
            values = self._to_floats([item[1] for item in items])
            accepted = []
            for (raw, _, step, timestamp), value in zip(items, values):
                point = self._accept(str(raw), value, step, timestamp)
                if point is not None:
                    accepted.append(point)
            with self._lock:
                self._pending.extend(accepted)
                if len(self._pending) > self.max_buffered_points:
                    self._spool_oldest(len(self._pending) - self.max_buffered_points // 2)
                due = len(self._pending) >= MAX_METRICS_PER_REQUEST or self._flush_requests or self._finishing
            if due:
                self._send_wake.set()
        finally:
            with self._lock:
                self._collecting = False
                self._cv.notify_all()
            self._collect_lock.release()

    def _to_floats(self, values: list[Any]) -> list[Any]:
        """Python floats (or markers) for logged values; one host copy per device and dtype."""
        out: list[Any] = [None] * len(values)
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for index, value in enumerate(values):
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    out[index] = _NOT_SCALAR
                else:
                    groups.setdefault((value.device, value.dtype), []).append(index)
            else:
                out[index] = _as_float(value)
        for (device, _), indices in groups.items():
            try:
                stacked = torch.stack([values[i].reshape(()) for i in indices])
                host = _to_host(stacked) if device.type == "cuda" else stacked.cpu()
                for index, number in zip(indices, host.tolist()):
                    out[index] = _as_float(number)
            except Exception as err:
                self._defer(f"could not read metric values on {device}: {err!r}; they are not logged")
                for index in indices:
                    out[index] = _BAD_VALUE
        return out

    def _accept(self, raw: str, value: Any, step: Any, timestamp: int) -> tuple[str, float, int, int] | None:
        key, message = self._metric_names(raw)
        if message:
            self._defer(message)
        if value is _BAD_VALUE or value is _NOT_SCALAR:
            self._drop_once(key, "type", f"metric {raw!r} is not a number or a one-element tensor; it is not logged")
            return None
        if not math.isfinite(value):
            if ("nonfinite", key) not in self._warned_keys:
                with self._lock:
                    self._pending_tags[f"cadence.nonfinite/{key}"[:MAX_KEY_LENGTH]] = f"{value} at step {step}"
            self._drop_once(
                key, "nonfinite", f"metric {raw!r} is {value} at step {step}; non-finite values are not logged"
            )
            return None
        try:
            number = int(step)
        except (TypeError, ValueError, OverflowError):
            number = 2**63
        if not -(2**63) <= number < 2**63:
            self._drop_once(key, "step", f"metric {raw!r} has step {step!r}, not a 64-bit int; it is not logged")
            return None
        step = number
        last = self._last_step.get(key)
        if last is not None and step <= last:
            message = (
                f"metric {raw!r} was already logged at step {last}; points at step {step} and earlier are "
                f"dropped so that every step appears once, in increasing order"
            )
            if self._attached:  # a resumed run logs again what it logged before the crash
                self.stats["dropped_points"] += 1
            else:
                self._drop_once(key, "step-order", message)
            return None
        self._last_step[key] = step
        return key, value, timestamp, step

    def _drop_once(self, key: str, kind: str, message: str) -> None:
        self.stats["dropped_points"] += 1
        if (kind, key) not in self._warned_keys:
            self._warned_keys.add((kind, key))
            self._defer(message)

    def _spool_oldest(self, count: int) -> None:
        """Move the `count` oldest pending points to a spool file (called with _lock held)."""
        points = [self._pending.popleft() for _ in range(count)]
        folder = self.spill_dir / "spool" / str(self.run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            meta = folder / "meta.json"
            if not meta.exists():
                meta.write_text(json.dumps(self._spool_meta(), indent=1))
            self._spool_seq += 1
            path = folder / f"{self._spool_seq:06d}.jsonl"
            partial = path.with_suffix(".partial")
            with partial.open("w") as handle:
                handle.writelines(json.dumps(point) + "\n" for point in points)
            os.replace(partial, path)
        except OSError as err:
            self.stats["dropped_points"] += len(points)
            self._defer(f"{len(points)} metric points could not be spooled to {folder} and are lost: {err}")
            return
        self._spool_files.append(path)
        self.stats["spooled_points"] += len(points)
        if self.stats["spooled_points"] == len(points):
            self._defer(
                f"MLflow tracking at {self.tracking_uri} is not keeping up ({self._last_error or 'slow'}); "
                f"more than {self.max_buffered_points} points were pending, so the oldest are spooled to {folder} "
                f"and sent when the server answers again"
            )

    def _spool_meta(self) -> dict[str, Any]:
        return {
            "tracking_uri": self.tracking_uri,
            "run_id": self.run_id,
            "experiment_name": self.experiment_name,
            "offline": self.offline,
        }

    # Sender thread ------------------------------------------------------------------------------
    def _sender_main(self) -> None:
        while True:
            self._send_wake.wait(self._sender_timeout())
            self._send_wake.clear()
            if self._closed:
                return
            try:
                while not self._closed and self._send_one():
                    pass
            except Exception:
                _log.exception("cadence: the MLflow sender failed; retrying")
                with self._lock:
                    self._note_failure(RuntimeError("sender error"))

    def _sender_timeout(self) -> float:
        now = time.monotonic()
        with self._lock:
            if self._failures:
                wait = self._next_attempt - now
            elif self._pending:
                wait = self._last_flush + self.flush_interval_s - now
            else:
                wait = self.flush_interval_s
            for artifact in self._artifacts:
                wait = min(wait, artifact.next_try - now)
        return min(max(wait, 0.005), self.flush_interval_s)

    def _urgent(self) -> bool:
        return bool(self._flush_requests) or self._finishing

    def _send_one(self) -> bool:
        """Do one request if one is due; True if another may follow right away."""
        now = time.monotonic()
        with self._lock:
            if self._dead or self._closed or (self._failures and now < self._next_attempt):
                return False
            if self._pending_params or self._pending_tags:
                n_params, n_tags = _fit_params_tags(
                    list(self._pending_params.items()), list(self._pending_tags.items())
                )
                params = list(self._pending_params.items())[:n_params]
                tags = list(self._pending_tags.items())[:n_tags]
                return self._send_params_tags(params, tags)
            if self._spool_files:
                return self._send_spooled()
            due = self._urgent() or self._draining or len(self._pending) >= MAX_METRICS_PER_REQUEST
            if self._pending and (due or now >= self._last_flush + self.flush_interval_s):
                self._draining = True
                count = _fit_metrics(self._pending[i] for i in range(min(len(self._pending), MAX_METRICS_PER_REQUEST)))
                chunk = [self._pending.popleft() for _ in range(count)]
                return self._send_metrics(chunk)
            if self._draining:
                self._draining = False
                self._last_flush = now
            for artifact in self._artifacts:
                if artifact.next_try <= now:
                    return self._send_artifact(artifact)
            if self._params_json_dirty:
                return self._send_params_json()
            if self._terminate is not None and self._idle():
                return self._send_terminate(*self._terminate)
            return False

    # Each _send_* is called with _lock held; it releases the lock around the request.
    def _request(self, fn: Callable[[], Any]) -> BaseException | None:
        self._request_started = time.monotonic()
        self._lock.release()
        try:
            fn()
            return None
        except Exception as err:
            return err
        finally:
            self._lock.acquire()
            self._request_started = 0.0
            self.stats["requests"] += 1

    def _struggling(self, slow_s: float = 1.0) -> bool:
        """The server is failing, gone, or has not answered the request in progress for `slow_s`."""
        started = self._request_started
        return bool(self._failures or self._dead or (started and time.monotonic() - started > slow_s))

    def _note_failure(self, err: BaseException) -> None:
        self.stats["failed_requests"] += 1
        self._failures += 1
        self._last_error = _short(err)
        cap = min(self.max_backoff_s, 1.0) if self._urgent() else self.max_backoff_s
        delay = min(cap, 0.25 * 2 ** min(self._failures - 1, 20)) * random.uniform(0.5, 1.0)
        self._next_attempt = time.monotonic() + delay
        if self._failures == 1:
            _log.warning("cadence: MLflow tracking at %s failed (%s); buffering and retrying", self.tracking_uri, err)
            self._prepare_spill_store()

    def _note_success(self) -> None:
        if self._failures:
            _log.warning("cadence: MLflow tracking at %s answers again after %d failed attempts", self.tracking_uri,
                         self._failures)  # fmt: skip
        self._failures = 0
        self._cv.notify_all()

    def _note_dead(self, err: BaseException) -> None:
        self._dead = _short(err)
        self._defer(
            f"MLflow run {self.run_id} at {self.tracking_uri} no longer accepts data ({self._dead}); what is not "
            f"delivered yet is written to the local spill store {self.spill_uri} when the run finishes"
        )
        self._cv.notify_all()

    def _handle(self, err: BaseException | None, kind: str | None = None) -> bool:
        if err is None:
            self._note_success()
            return True
        kind = kind or _classify(err)
        if kind == "run":
            self._note_dead(err)
        else:
            self._note_failure(err)
        self._cv.notify_all()
        return False

    def _send_params_tags(self, params: list[tuple[str, str]], tags: list[tuple[str, str]]) -> bool:
        from mlflow.entities import Param, RunTag

        def send(ps: list[tuple[str, str]], ts: list[tuple[str, str]]) -> BaseException | None:
            return self._request(
                lambda: self._client.log_batch(
                    self.run_id, params=[Param(k, v) for k, v in ps], tags=[RunTag(k, v) for k, v in ts]
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
                    self._defer(f"MLflow refused param {key!r}={value[:200]!r}: {_short(single)}")
                elif single is not None:
                    err = single
                    break
            for key, value in tags if err is None else []:
                single = send([], [(key, value)])
                if single is not None and _classify(single) == "item":
                    self._defer(f"MLflow refused tag {key!r}={value[:200]!r}: {_short(single)}")
                elif single is not None:
                    err = single
                    break
        if err is not None:
            return self._handle(err)
        for key, value in params:
            if self._pending_params.get(key) == value:
                del self._pending_params[key]
        for key, value in tags:
            if self._pending_tags.get(key) == value:
                del self._pending_tags[key]
        return self._handle(None)

    def _deliver_points(self, points: list[tuple[str, float, int, int]]) -> None:
        """Send points, isolating and dropping the ones the server refuses; raises _SendError otherwise."""
        from mlflow.entities import Metric

        err = self._request(
            lambda: self._client.log_batch(self.run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in points])
        )
        if err is None:
            self.stats["delivered_points"] += len(points)
            return
        kind = _classify(err)
        if kind != "item":
            raise _SendError(kind, err, points)
        if len(points) == 1:
            self.stats["dropped_points"] += 1
            self._defer(f"MLflow refused metric point {points[0]}: {_short(err)}")
            return
        middle = len(points) // 2
        try:
            self._deliver_points(points[:middle])
        except _SendError as failed:
            raise _SendError(failed.kind, failed.cause, failed.unsent + points[middle:]) from None
        self._deliver_points(points[middle:])

    def _send_metrics(self, chunk: list[tuple[str, float, int, int]]) -> bool:
        self._inflight = chunk
        try:
            self._deliver_points(chunk)
        except _SendError as failed:
            if self._closed:  # finish gave up on this request and spilled the chunk
                return False
            self._pending.extendleft(reversed(failed.unsent))
            return self._handle(failed.cause, failed.kind)
        finally:
            self._inflight = None
        return self._handle(None)

    def _send_spooled(self) -> bool:
        path = self._spool_files[0]
        points, end = _read_spool(path, self._spool_offset, MAX_METRICS_PER_REQUEST)
        points = points[: _fit_metrics(points)] if points else points
        if not points:
            self._spool_files.popleft()
            self._spool_offset = 0
            with contextlib.suppress(OSError):
                path.unlink()
            return True
        _, end = _read_spool(path, self._spool_offset, len(points))
        try:  # the points stay in the spool file until delivered (no _inflight copy)
            self._deliver_points(points)
        except _SendError as failed:
            if self._closed:
                return False
            return self._handle(failed.cause, failed.kind)
        if not self._closed:
            self._spool_offset = end
        return self._handle(None)

    def _send_artifact(self, artifact: _Artifact) -> bool:
        local = artifact.local

        def upload() -> None:
            if local.is_dir():
                self._client.log_artifacts(
                    self.run_id, str(local), artifact_path=_join(artifact.artifact_dir, local.name)
                )
            else:
                self._client.log_artifact(self.run_id, str(local), artifact_path=artifact.artifact_dir)

        err = self._request(upload)
        if err is None:
            if artifact in self._artifacts:
                self._artifacts.remove(artifact)
            shutil.rmtree(local.parent, ignore_errors=True)
            return True
        artifact.attempts += 1
        artifact.next_try = time.monotonic() + min(self.max_backoff_s, 0.5 * 2 ** min(artifact.attempts, 20))
        if artifact.attempts == 1:
            _log.warning("cadence: uploading %s to MLflow failed (%s); retrying", local.name, err)
        self._cv.notify_all()
        return True

    def _send_params_json(self) -> bool:
        self._params_json_dirty = False
        snapshot = dict(sorted(self._all_params.items()))
        text = json.dumps(snapshot, indent=1, sort_keys=True)
        folder = self._staging / "params"
        folder.mkdir(exist_ok=True)
        path = folder / Path(PARAMS_ARTIFACT).name
        path.write_text(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        self._pending_tags[TAG_PARAMS_HASH] = digest
        self._all_tags[TAG_PARAMS_HASH] = digest
        artifact_dir = str(Path(PARAMS_ARTIFACT).parent)
        err = self._request(lambda: self._client.log_artifact(self.run_id, str(path), artifact_path=artifact_dir))
        if err is not None:
            self._params_json_dirty = True
            return self._handle(err, "transient" if _classify(err) == "item" else None)
        return self._handle(None)

    def _send_terminate(self, status: str, end_ms: int) -> bool:
        err = self._request(lambda: self._client.set_terminated(self.run_id, status, end_time=end_ms))
        if err is None:
            self._terminated = True
            self._cv.notify_all()
            return False
        return self._handle(err)

    # Waiting, finishing, spilling ---------------------------------------------------------------
    def _idle(self) -> bool:
        """Everything logged so far is delivered (call with _lock held)."""
        return not (
            self._inbox
            or self._collecting
            or self._pending
            or self._spool_files
            or self._pending_params
            or self._pending_tags
            or self._artifacts
            or self._params_json_dirty
            or self._inflight is not None
        )

    def _wait(self, done: Callable[[], bool], deadline: float) -> bool:
        with self._cv:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cv.wait(min(remaining, 0.05))
            return True

    def _finish(self, status: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._finish_timeout_used = timeout_s
        end_ms = int(time.time() * 1000)
        if self._struggling(slow_s=0.5):
            self._prepare_spill_store()
        with self._lock:
            self._finishing = True
            self._terminate = (status, end_ms)
            self._next_attempt = min(self._next_attempt, time.monotonic())
        self._collect_wake.set()
        self._send_wake.set()
        delivered = self._wait(lambda: self._terminated or self._dead is not None, deadline)
        with self._lock:
            self._closed = True
            self._stop_collector = True
            self._cv.notify_all()
        self._collect_wake.set()
        self._send_wake.set()
        self._collector.join(timeout=5.0)
        self._emit_deferred()
        if delivered and self._terminated:
            if self.offline:
                self._warn(
                    f"MLflow run {self.run_id} was logged offline to {self.spill_uri}; import it into "
                    f"{self.tracking_uri} with:\n    {self._import_hint}"
                )
            return
        self._collect(lock_timeout_s=5.0)  # what the collector had not picked up yet
        self._spill(status, end_ms)
        self._emit_deferred()

    def _take_undelivered(self) -> tuple[list[tuple[str, float, int, int]], list[_Artifact]]:
        with self._lock:
            points = list(self._inflight or [])
            for index, path in enumerate(self._spool_files):
                spooled, _ = _read_spool(path, self._spool_offset if index == 0 else 0, None)
                points.extend(spooled)
            points.extend(self._pending)
            self._pending.clear()
            artifacts = list(self._artifacts)
            if self._params_json_dirty or self._all_params:
                text = json.dumps(dict(sorted(self._all_params.items())), indent=1, sort_keys=True)
                path = self._staging / "params-final" / Path(PARAMS_ARTIFACT).name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                self._all_tags[TAG_PARAMS_HASH] = hashlib.sha256(text.encode()).hexdigest()
                artifacts.append(_Artifact(path, str(Path(PARAMS_ARTIFACT).parent)))
        return points, artifacts

    def _spill(self, status: str, end_ms: int) -> None:
        points, artifacts = self._take_undelivered()
        reason = (
            self._dead or self._last_error or f"no answer within the finish timeout of {self._finish_timeout_used:g} s"
        )
        try:
            client, experiment_id = self._spill_client()
            if self.offline:  # the spill store is the run's own store
                spill_run = self.run_id
            else:
                tags = {
                    **self._all_tags,
                    TAG_KIND: "remainder",
                    TAG_TARGET_URI: self.tracking_uri,
                    TAG_TARGET_EXPERIMENT: self.experiment_name,
                    TAG_TARGET_RUN: str(self.run_id),
                }
                spill_run = client.create_run(experiment_id, run_name=self.run_name, tags=tags).info.run_id
            _write_run(client, spill_run, points, self._params, self._all_tags, artifacts, self._defer)
            client.set_terminated(spill_run, status, end_time=end_ms)
        except Exception as err:
            self._spill_to_spool(points, status, err, reason)
            return
        self.stats["spilled_points"] += len(points)
        with self._lock:
            for path in list(self._spool_files):
                with contextlib.suppress(OSError):
                    path.unlink()
            self._spool_files.clear()
        with contextlib.suppress(OSError):
            folder = self.spill_dir / "spool" / str(self.run_id)
            if folder.exists():
                (folder / "meta.json").unlink(missing_ok=True)
                folder.rmdir()
        self._warn(
            f"MLflow run {self.run_id} at {self.tracking_uri}: {len(points)} metric points, the params, tags and "
            f"{len(artifacts)} artifacts could not be confirmed as delivered ({reason}). They are saved, with the "
            f"final status {status}, in the local MLflow store {self.spill_uri} (run {spill_run}). Import them "
            f"when the server is reachable with:\n    {self._import_hint}"
        )

    def _spill_to_spool(self, points: list[tuple[str, float, int, int]], status: str, err: BaseException,
                        reason: str) -> None:  # fmt: skip
        """Last resort when the SQLite spill store fails: plain JSONL that `import_spill` also reads."""
        folder = self.spill_dir / "spool" / str(self.run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / "final.jsonl"
            with final.open("w") as handle:
                handle.writelines(json.dumps(point) + "\n" for point in points)
            meta = {**self._spool_meta(), "params": self._params, "tags": self._all_tags, "status": status}
            (folder / "meta.json").write_text(json.dumps(meta, indent=1))
            with self._lock:
                for path in self._spool_files:  # their points are in final.jsonl now
                    with contextlib.suppress(OSError):
                        path.unlink()
                self._spool_files.clear()
        except OSError as disk_error:
            self._warn(
                f"MLflow run {self.run_id}: {len(points)} metric points could not be delivered ({reason}) nor saved "
                f"locally ({err!r}; {disk_error!r}); they are lost"
            )
            return
        self.stats["spilled_points"] += len(points)
        self._warn(
            f"MLflow run {self.run_id} at {self.tracking_uri}: {len(points)} metric points could not be delivered "
            f"({reason}) and the spill store {self.spill_uri} failed ({_short(err)}); they are saved as JSON lines "
            f"in {folder}. Import them with:\n    {self._import_hint}"
        )


def _to_host(stacked: torch.Tensor) -> torch.Tensor:
    """Copy a CUDA tensor to the host without a blocking synchronisation: copy, record, poll."""
    with torch.cuda.device(stacked.device):
        host = stacked.to("cpu", non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    while not event.query():
        time.sleep(0.0005)
    return host
