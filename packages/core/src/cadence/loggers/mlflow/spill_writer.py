"""`SpillWriter`: the local SQLite spill store, and what `finish` writes there."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from cadence.loggers.mlflow.record import RunRecord
from cadence.loggers.mlflow.spill import (
    _SPILL_DB,
    PARAMS_ARTIFACT,
    TAG_KIND,
    TAG_TARGET_EXPERIMENT,
    TAG_TARGET_RUN,
    TAG_TARGET_URI,
    _Artifact,
    _read_spool,
    _write_run,
)
from cadence.loggers.mlflow.state import Notices, Point, RunTarget, Shared
from cadence.loggers.mlflow.store import _get_or_create_experiment, _mlflow_client, _short, _sqlite_uri

_log = logging.getLogger(__name__)


class SpillWriter:
    """The spill store (``<spill_dir>/spill.db``): an offline run's home, else where `finish` leaves the rest.

    Whatever is not confirmed as delivered when `finish` gives up goes into a "remainder" run
    there, tagged with its target, for `import_spill`; if even that fails, into plain JSONL.
    During an outage the store is prepared in the background, so that `finish` finds it ready.
    """

    def __init__(self, run: RunTarget, shared: Shared, notices: Notices, record: RunRecord, staging: Path):
        self._run, self._shared, self._notices, self._record = run, shared, notices, record
        self._staging = staging
        self._lock = threading.Lock()
        self._client: Any = None
        self._experiment_id: str | None = None
        self._prepared = False
        self._ready: Path | None = None  # a store migrated ahead of time in the staging folder

    def client(self) -> tuple[Any, str]:
        """The local spill store and its experiment (created on first use; thread-safe)."""
        run = self._run
        with self._lock:
            if self._client is None:
                run.spill_dir.mkdir(parents=True, exist_ok=True)
                database, ready = run.spill_dir / _SPILL_DB, self._ready
                if ready is not None and ready.exists() and not database.exists():
                    shutil.move(ready, database)  # migrated ahead of time by `prepare`
                client = _mlflow_client(run.spill_uri)
                artifacts = (run.spill_dir / "artifacts").as_uri()
                self._experiment_id = _get_or_create_experiment(client, run.experiment_name, artifacts)
                self._client = client
            assert self._experiment_id is not None
            return self._client, self._experiment_id

    def prepare(self) -> None:
        """Get the spill store ready in the background (during an outage; any thread).

        A new store is migrated in the private staging folder and moved into ``spill_dir`` only
        if something is spilled, so a run that recovers leaves nothing behind.
        """
        if self._run.offline or self._prepared:
            return
        self._prepared = True

        def prepare() -> None:
            try:
                with self._lock:
                    if self._client is not None:
                        return
                    if not (self._run.spill_dir / _SPILL_DB).exists():
                        ready = self._staging / _SPILL_DB
                        _mlflow_client(_sqlite_uri(ready)).search_experiments()  # runs MLflow's migrations
                        self._ready = ready
                        return
                self.client()
            except Exception as err:
                _log.warning("cadence: could not prepare the MLflow spill store %s: %s", self._run.spill_uri, err)

        try:
            threading.Thread(target=prepare, name="cadence-mlflow-spill-prep", daemon=True).start()
        except RuntimeError:  # at interpreter shutdown no thread can start; `spill` prepares it itself
            self._prepared = False

    def spill(self, status: str, end_ms: int, timeout_s: float) -> None:
        """Write what is undelivered, with the final `status`, and say in one warning how to import it."""
        run, shared, record = self._run, self._shared, self._record
        points, artifacts = self._take_undelivered()
        reason = shared.dead or shared.last_error or f"no answer within the finish timeout of {timeout_s:g} s"
        try:
            client, experiment_id = self.client()
            if run.offline:  # the spill store is the run's own store
                spill_run = run.run_id
            else:
                tags = {
                    **record.all_tags,
                    TAG_KIND: "remainder",
                    TAG_TARGET_URI: run.tracking_uri,
                    TAG_TARGET_EXPERIMENT: run.experiment_name,
                    TAG_TARGET_RUN: str(run.run_id),
                }
                spill_run = client.create_run(experiment_id, run_name=run.run_name, tags=tags).info.run_id
            _write_run(client, spill_run, points, record.params, record.all_tags, artifacts, self._notices.defer)
            client.set_terminated(spill_run, status, end_time=end_ms)
        except Exception as err:
            self._to_spool(points, status, err, reason)
            return
        run.stats["spilled_points"] += len(points)
        self._forget_spool_files()
        with contextlib.suppress(OSError):
            folder = run.spool_folder
            if folder.exists():
                (folder / "meta.json").unlink(missing_ok=True)
                folder.rmdir()
        self._notices.warn(
            f"MLflow run {run.run_id} at {run.tracking_uri}: {len(points)} metric points, the params, tags and "
            f"{len(artifacts)} artifacts could not be confirmed as delivered ({reason}). They are saved, with the "
            f"final status {status}, in the local MLflow store {run.spill_uri} (run {spill_run}). Import them "
            f"when the server is reachable with:\n    {run.import_hint}"
        )

    def _take_undelivered(self) -> tuple[list[Point], list[_Artifact]]:
        shared = self._shared
        with shared.lock:
            points = list(shared.inflight or [])
            for index, path in enumerate(shared.spool_files):
                spooled, _ = _read_spool(path, shared.spool_offset if index == 0 else 0, None)
                points.extend(spooled)
            points.extend(shared.pending)
            shared.pending.clear()
            artifacts = list(shared.artifacts)
            if shared.params_json_dirty or self._record.all_params:
                path = self._staging / "params-final" / Path(PARAMS_ARTIFACT).name
                self._record.write_params_json(path)
                artifacts.append(_Artifact(path, str(Path(PARAMS_ARTIFACT).parent)))
        return points, artifacts

    def _to_spool(self, points: list[Point], status: str, err: BaseException, reason: str) -> None:
        """Last resort when the SQLite spill store fails: plain JSONL that `import_spill` also reads."""
        run, record = self._run, self._record
        folder = run.spool_folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / "final.jsonl"
            with final.open("w") as handle:
                handle.writelines(json.dumps(point) + "\n" for point in points)
            meta = {**run.spool_meta(), "params": record.params, "tags": record.all_tags, "status": status}
            (folder / "meta.json").write_text(json.dumps(meta, indent=1))
            self._forget_spool_files()  # their points are in final.jsonl now
        except OSError as disk_error:
            self._notices.warn(
                f"MLflow run {run.run_id}: {len(points)} metric points could not be delivered ({reason}) nor saved "
                f"locally ({err!r}; {disk_error!r}); they are lost"
            )
            return
        run.stats["spilled_points"] += len(points)
        self._notices.warn(
            f"MLflow run {run.run_id} at {run.tracking_uri}: {len(points)} metric points could not be delivered "
            f"({reason}) and the spill store {run.spill_uri} failed ({_short(err)}); they are saved as JSON lines "
            f"in {folder}. Import them with:\n    {run.import_hint}"
        )

    def _forget_spool_files(self) -> None:
        with self._shared.lock:
            for path in list(self._shared.spool_files):
                with contextlib.suppress(OSError):
                    path.unlink()
            self._shared.spool_files.clear()
