"""`MLFlowLogger`: the facade that opens the run, takes the caller's calls and ends the run (see the package)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadence.loggers import STATUSES, LoggerDestination, failure_kind
from cadence_mlflow.collector import Collector
from cadence_mlflow.names import PARAMS_ARTIFACT, TAG_PARAMS_HASH, Notices, ParamsAndTags
from cadence_mlflow.outbox import Outbox
from cadence_mlflow.sender import Sender
from cadence_mlflow.spill import Remainder, SpillStore, SpoolFiles, spill_store_uri
from cadence_mlflow.tracking import Artifact, Opened, Run, Unreachable, open_run, short, sqlite_uri
from cadence_mlflow.writer import WriterClient, writes_out_of_process

if TYPE_CHECKING:
    from cadence import Logger, State

_STATS = ("requests", "failed_requests", "delivered_points", "dropped_points", "spooled_points", "spilled_points")


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
        out_of_process: make the requests of the run from a child process (`cadence_mlflow.writer`), so that
            the store's CPU work does not take the training process's GIL. Default (None): on a machine with
            a CUDA device, for stores the client writes itself (``sqlite:``, ``file:``, other SQL databases),
            where that work is about 100-250 us per metric point; a tracking server does it in its own
            process, and on a CPU-only machine a thread costs the same CPU without the child's start-up.

    Only the process with ``RANK`` 0 (or without ``RANK``) creates a run; on other ranks the
    logger does nothing and ``run_id`` is None. The `Trainer` ends the run by calling `finish`
    once; without a trainer, whoever drives the logger calls it (else it runs at exit).
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
        out_of_process: bool | None = None,
    ):
        try:
            import mlflow  # noqa: F401  (imported here so that importing the package never imports mlflow)
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
        if out_of_process not in (None, True, False):
            raise TypeError(f"out_of_process={out_of_process!r} must be True, False or None (by the store)")
        if out_of_process and os.name != "posix":
            raise ValueError(f"out_of_process=True needs a POSIX system (its child inherits two pipes); {os.name!r} "
                             "is not one: leave it None or pass False")  # fmt: skip
        self.experiment_name, self.run_name = experiment_name, run_name
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(Path("mlflow.db"))
        self.spill_dir = Path(spill_dir if spill_dir is not None else "mlflow-spill").resolve()
        self.flush_interval_s, self.finish_timeout_s = float(flush_interval_s), float(finish_timeout_s)
        self.max_backoff_s, self.max_buffered_points = float(max_backoff_s), max_buffered_points
        self._run: Run | None = None
        self._finished = False
        self._finish_lock = threading.Lock()
        self._named = False
        self._attached = run_id is not None
        self._notices = Notices()
        self._record = ParamsAndTags(self._notices.warn_once)
        self._inert = os.environ.get("RANK", "0").strip() not in ("", "0")
        if self._inert:
            return

        self._staging = Path(tempfile.mkdtemp(prefix="cadence-mlflow-"))  # copies of artifacts
        self._staged = 0
        self._spill = SpillStore(self.spill_dir, self.tracking_uri, experiment_name, run_name, self._staging,
                                 self._notices.defer)  # fmt: skip
        user_tags = self._record.add_tags(tags or {})
        try:
            run, opened = self._open(run_id, user_tags, connect_timeout_s)
        except BaseException:
            shutil.rmtree(self._staging, ignore_errors=True)
            raise
        self._run = run
        meta = {"tracking_uri": self.tracking_uri, "run_id": run.run_id, "experiment_name": experiment_name,
                "offline": run.offline}  # fmt: skip
        self._spool = SpoolFiles(self.spill_dir / "spool" / run.run_id, meta)
        self._outbox = Outbox(self._spool, self._notices.defer, tracking_uri=self.tracking_uri,
                              flush_interval_s=self.flush_interval_s, max_buffered_points=max_buffered_points,
                              max_backoff_s=self.max_backoff_s)  # fmt: skip
        self._collector = Collector(self._outbox, self._notices.defer, resumed=self._attached,
                                    interval_s=max(0.01, min(self.flush_interval_s / 2, 0.5)),
                                    last_steps=opened.latest_steps if opened else {},
                                    on_outage=self._spill.prepare)  # fmt: skip
        store = self._spill.uri if run.offline else self.tracking_uri
        if writes_out_of_process(out_of_process, store):
            run = dataclasses.replace(run, client=WriterClient(store))  # the sender's calls only: see writer.py
        self._sender = Sender(self._outbox, run, self._notices.defer, tracking_uri=self.tracking_uri,
                              spill_uri=self._spill.uri, on_outage=self._spill.prepare)  # fmt: skip
        if opened is not None:  # on the server (a resumed run continues where it stopped)
            self._record.params.update(opened.params)
            if run_id is not None:  # mark the new segment of a resumed run, and send the tags it was given
                segment = int(opened.tags.get("cadence.segments", "1") or 1) + 1
                self.set_tags({"cadence.segments": segment, f"cadence.segment.{segment}.start_ms": _now_ms()})
                self._outbox.add_tags(user_tags)  # already sanitised: not through set_tags again
        self._collector.start()
        self._sender.start()
        self._atexit = functools.partial(_finish_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    def _open(self, run_id: str | None, tags: dict[str, str], timeout_s: float) -> tuple[Run, Opened | None]:
        """The run on the tracking server and what it holds; or, when the server is unreachable, offline in the
        spill store (and nothing it holds)."""
        try:
            opened = open_run(self.tracking_uri, self.experiment_name, self.run_name, run_id, tags, timeout_s)
        except Unreachable as err:
            run = self._spill.open_offline(run_id, tags, err.cause)
            self._notices.warn(
                f"MLflow tracking at {self.tracking_uri} could not be reached ({short(err.cause)}); this run is "
                f"logged offline to the local MLflow store {self._spill.uri} (run {run.run_id}). Import it "
                f"when the server is reachable with:\n    {self._spill.import_hint}"
            )
            return run, None
        return opened.run, opened

    @property
    def run_id(self) -> str | None:
        return None if self._run is None else self._run.run_id

    @property
    def experiment_id(self) -> str | None:
        return None if self._run is None else self._run.experiment_id

    @property
    def offline(self) -> bool:
        """The run lives in the local spill store (the server was unreachable at start)."""
        return self._run is not None and self._run.offline

    @property
    def spill_uri(self) -> str:
        return spill_store_uri(self.spill_dir)

    @property
    def stats(self) -> dict[str, int]:
        """Counters for monitoring and tests: requests, failed requests; delivered, dropped, spooled, spilled points."""
        parts = (
            () if self._inert else (self._outbox.stats, self._collector.stats, self._sender.stats, self._spill.stats)
        )
        return {key: sum(part.get(key, 0) for part in parts) for key in _STATS}

    # Logging API (caller's thread) --------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Queue the values and return; tensors are read back to the host in the background."""
        if self._finished or self._inert:
            if self._finished and not self._inert:
                self._notices.warn_once(
                    "finished", "", f"MLFlowLogger of run {self.run_id} is finished; metrics are ignored"
                )
            return
        self._outbox.put_metrics(metrics, step)
        if self._notices.deferred:  # every batch: no call unless a background thread has warned
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
        self._notices.emit()  # before queueing: what the threads make of these params comes at the next call
        new, changed = self._record.add_params(params, self.run_id)
        params_json = self._stage_params_json() if changed else None  # the full values, hashed in a tag
        self._outbox.add_params(new)
        if changed:
            self._outbox.add_tags({TAG_PARAMS_HASH: self._record.tags[TAG_PARAMS_HASH]})
        if params_json is not None:
            self._outbox.add_artifact(params_json)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags of the run (values as stable strings, cut to 5000 characters)."""
        if self._inert or self._finished:
            return
        self._outbox.add_tags(self._record.add_tags(tags))

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Upload a file or folder as ``name`` (a path inside the run's artifacts; default: its own name).

        The file is copied now, so it may change or disappear afterwards; the upload happens
        in the background.
        """
        if self._inert or self._finished:
            return
        source = Path(path)
        copy = shutil.copytree if source.is_dir() else shutil.copy2
        artifact = self._stage(name or source.name, f"artifact {str(source)!r}", lambda staged: copy(source, staged))
        if artifact is not None:
            self._outbox.add_artifact(artifact)

    def _stage(self, name: str, what: str, write: Callable[[Path], object]) -> Artifact | None:
        """A copy of an artifact in the staging folder, written by `write` (None, with a warning, if that fails)."""
        artifact_dir, _, base = name.replace("\\", "/").strip("/").rpartition("/")
        self._staged += 1
        staged = self._staging / f"{self._staged:05d}" / base
        try:
            staged.parent.mkdir(parents=True)
            write(staged)
        except OSError as err:
            self._notices.warn(f"{what} is not logged: {err}")
            return None
        return Artifact(staged, artifact_dir or None)

    def _stage_params_json(self) -> Artifact | None:
        text = self._record.params_json()
        return self._stage(PARAMS_ARTIFACT, "the params artifact", lambda staged: staged.write_text(text))

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
            return self._outbox.ended
        outbox = self._outbox
        if not outbox.start_waiting(patient=timeout_s is not None):
            return False
        try:
            delivered = outbox.wait_delivered(
                time.monotonic() + (self.finish_timeout_s if timeout_s is None else timeout_s)
            )
            if not delivered and outbox.struggling(slow_s=0.5):
                self._spill.prepare()
            return delivered
        finally:
            outbox.stop_waiting()
            self._notices.emit()

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
            message = "".join(traceback.format_exception_only(type(error), error)).strip()[-4000:]
            self.set_tags({"cadence.error": message, "cadence.failure": failure_kind(error)})
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
            self._spill.release_staging()

    def _end_run(self, status: str, timeout_s: float) -> None:
        """Let the sender end the run; stop both threads; spill whatever was not confirmed by the deadline."""
        deadline, end_ms, outbox, run = time.monotonic() + timeout_s, _now_ms(), self._outbox, self._run
        assert run is not None
        if outbox.struggling(slow_s=0.5):
            self._spill.prepare()
        outbox.request_end(status, end_ms)
        delivered = outbox.wait_ended(deadline)
        outbox.close()
        self._collector.join(timeout=5.0)
        self._notices.emit()
        if delivered and outbox.ended:
            if run.offline:
                self._notices.warn(
                    f"MLflow run {run.run_id} was logged offline to {self._spill.uri}; import it into "
                    f"{self.tracking_uri} with:\n    {self._spill.import_hint}"
                )
            return
        self._collector.collect(lock_timeout_s=5.0)  # what the collector had not picked up yet
        points, artifacts = outbox.take_undelivered()
        reason = outbox.dead or outbox.last_error or f"no answer within the finish timeout of {timeout_s:g} s"
        params_json = self._stage_params_json() if self._record.full_params else None
        if params_json is not None:  # the latest params artifact goes with the rest, once
            artifacts = [a for a in artifacts if a.target != params_json.target] + [params_json]
        record = self._record
        rest = Remainder(points, artifacts, dict(record.params), dict(record.tags), status, end_ms, reason)
        self._notices.warn(self._spill.save(run, rest, self._spool))
        self._notices.emit()

    # Trainer callbacks and checkpoints ----------------------------------------------------------
    def close(self, state: State, logger: Logger) -> None:
        """Nothing to release: the run stays open until `finish`, which the trainer calls once (its threads and
        staging folder end with it)."""

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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _finish_at_exit(ref: weakref.ReferenceType[MLFlowLogger]) -> None:
    """The last resort for a process that never reached the trainer's handler (a logger never finished)."""
    logger = ref()
    if logger is None or logger._finished:
        return
    error = getattr(sys, "last_value", None)  # set when the program died of an uncaught exception
    status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED" if error is not None else "FINISHED"
    logger.finish(status)
