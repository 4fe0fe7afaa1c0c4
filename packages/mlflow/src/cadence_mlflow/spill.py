"""The spill: what the logger could not deliver, kept in local files and imported later.

* `SpoolFiles`: append-only JSONL files of points under ``<spill_dir>/spool/<run_id>``: the
  oldest pending points during an outage (replayed by the sender), and as a last resort at
  finish everything undelivered (``final.jsonl``, with params, tags and status in ``meta.json``).
* `SpillStore`: a local SQLite MLflow store, ``<spill_dir>/spill.db``: an offline run's own
  store, else where `finish` writes a "remainder" run tagged with the run it belongs to.
* `import_spill` (``python -m cadence_mlflow import <spill_dir> --tracking-uri <uri>``) sends
  both into a tracking store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence_mlflow.names import MAX_METRICS_PER_REQUEST, Point
from cadence_mlflow.tracking import (
    Artifact,
    Run,
    fit_metrics,
    get_or_create_experiment,
    mlflow_client,
    short,
    sqlite_uri,
    write_run,
)

_log = logging.getLogger(__name__)

IMPORT_COMMAND = "python -m cadence_mlflow import"
SPILL_DB = "spill.db"
# Tags on runs in the spill store, read by `import_spill`.
TAG_KIND = "cadence.spill.kind"  # "remainder" (of a run on the server) or "offline" (the whole run)
TAG_TARGET_URI = "cadence.spill.target_tracking_uri"
TAG_TARGET_EXPERIMENT = "cadence.spill.target_experiment_name"
TAG_TARGET_RUN = "cadence.spill.target_run_id"
TAG_IMPORT_TARGET = "cadence.spill.import_target_run_id"
TAG_IMPORTED = "cadence.spill.imported"


def spill_store_uri(spill_dir: Path) -> str:
    """The URI of the spill store of `spill_dir`."""
    return sqlite_uri(spill_dir / SPILL_DB)


def read_spool(path: Path, offset: int, limit: int | None) -> tuple[list[Point], int]:
    """Up to `limit` points of a spool file from byte `offset`, and the offset after them."""
    points: list[Point] = []
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            while limit is None or len(points) < limit:
                line = handle.readline()
                if not line:
                    break
                if line.strip():
                    key, value, timestamp, step = json.loads(line)
                    points.append((key, float(value), int(timestamp), int(step)))
                offset = handle.tell()
    except OSError as err:
        _log.warning("cadence: could not read spool file %s: %s", path, err)
    return points, offset


def _write_lines(path: Path, points: Sequence[Point]) -> None:
    with path.open("w") as handle:
        handle.writelines(json.dumps(point) + "\n" for point in points)


class SpoolFiles:
    """One run's spool files, oldest first, and how far the first one is delivered. Thread-safe.

    `meta` (the run's tracking URI, id, experiment and whether it is offline) goes to ``meta.json``.
    """

    def __init__(self, folder: Path, meta: Mapping[str, Any]):
        self.folder, self._meta = folder, dict(meta)
        self._lock = threading.Lock()
        self._files: deque[Path] = deque()
        self._offset = 0  # bytes of the first file already delivered
        self._written = 0

    def __bool__(self) -> bool:
        return bool(self._files)

    def write(self, points: Sequence[Point]) -> None:
        """Append a file holding `points` (raises OSError)."""
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            meta = self.folder / "meta.json"
            if not meta.exists():
                meta.write_text(json.dumps(self._meta, indent=1))
            self._written += 1
            path = self.folder / f"{self._written:06d}.jsonl"
            partial = path.with_suffix(".partial")
            _write_lines(partial, points)
            os.replace(partial, path)
            self._files.append(path)

    def next_chunk(self) -> tuple[list[Point], int]:
        """The next undelivered points that fit one request, and the offset to `advance` to once delivered."""
        with self._lock:
            while self._files:
                path = self._files[0]
                points, _ = read_spool(path, self._offset, MAX_METRICS_PER_REQUEST)
                points = points[: fit_metrics(points)]
                if points:
                    return points, read_spool(path, self._offset, len(points))[1]
                self._files.popleft()  # delivered to its end
                self._offset = 0
                with contextlib.suppress(OSError):
                    path.unlink()
            return [], 0

    def advance(self, offset: int) -> None:
        with self._lock:
            self._offset = offset

    def read_all(self) -> list[Point]:
        with self._lock:
            points: list[Point] = []
            for index, path in enumerate(self._files):
                points.extend(read_spool(path, self._offset if index == 0 else 0, None)[0])
            return points

    def forget(self) -> None:
        """Delete the files (their points are saved elsewhere)."""
        with self._lock:
            for path in self._files:
                with contextlib.suppress(OSError):
                    path.unlink()
            self._files.clear()

    def write_final(self, points: Sequence[Point], extra: Mapping[str, Any]) -> None:
        """All of `points` in ``final.jsonl``, `extra` (params, tags, status) in ``meta.json``; raises OSError."""
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_lines(self.folder / "final.jsonl", points)
        (self.folder / "meta.json").write_text(json.dumps({**self._meta, **extra}, indent=1))
        self.forget()  # their points are in final.jsonl now

    def remove_folder(self) -> None:
        with contextlib.suppress(OSError):
            if self.folder.exists():
                (self.folder / "meta.json").unlink(missing_ok=True)
                self.folder.rmdir()


@dataclass
class Remainder:
    """What `finish` could not deliver, and how the run ended."""

    points: list[Point]
    artifacts: list[Artifact]
    params: dict[str, str]
    tags: dict[str, str]
    status: str
    end_ms: int
    reason: str


class SpillStore:
    """The local spill store (``<spill_dir>/spill.db``): an offline run's home, else where `finish` leaves the rest.

    During an outage it is prepared in the background (`prepare`), so that `finish` finds it ready;
    a store migrated ahead of time waits in the private `staging` folder and moves into
    ``spill_dir`` only if something is spilled, so a run that recovers leaves nothing behind.
    """

    def __init__(self, spill_dir: Path, tracking_uri: str, experiment_name: str, run_name: str | None,
                 staging: Path, report: Callable[[str], None]):  # fmt: skip
        self.spill_dir, self.tracking_uri = spill_dir, tracking_uri
        self._experiment_name, self._run_name = experiment_name, run_name
        self._staging, self._report = staging, report
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._client: Any = None
        self._experiment_id: str | None = None
        self._prepared = False
        self._ready: Path | None = None  # a store migrated ahead of time in the staging folder
        self._staging_lock = threading.Lock()  # who removes the staging folder: `release_staging` or `prepare`
        self._preparing = self._released = False

    @property
    def uri(self) -> str:
        return spill_store_uri(self.spill_dir)

    @property
    def import_hint(self) -> str:
        return f"{IMPORT_COMMAND} {self.spill_dir} --tracking-uri {self.tracking_uri}"

    def client(self) -> tuple[Any, str]:
        """The local spill store and its experiment (created on first use; thread-safe)."""
        with self._lock:
            if self._client is None:
                self.spill_dir.mkdir(parents=True, exist_ok=True)
                database, ready = self.spill_dir / SPILL_DB, self._ready
                if ready is not None and ready.exists() and not database.exists():
                    shutil.move(ready, database)  # migrated ahead of time by `prepare`
                client = mlflow_client(self.uri)
                artifacts = (self.spill_dir / "artifacts").as_uri()
                self._experiment_id = get_or_create_experiment(client, self._experiment_name, artifacts)
                self._client = client
            assert self._experiment_id is not None
            return self._client, self._experiment_id

    def prepare(self) -> None:
        """Get the store ready in a background thread (during an outage; from any thread)."""
        if self._prepared or self._client is not None:
            return
        with self._staging_lock:
            if self._released:  # the run is over: nothing will be spilled through the staging folder
                return
            self._prepared = self._preparing = True

        def prepare() -> None:
            try:
                with self._lock:
                    if self._client is not None:
                        return
                    if not (self.spill_dir / SPILL_DB).exists():
                        ready = self._staging / SPILL_DB
                        mlflow_client(sqlite_uri(ready)).search_experiments()  # runs MLflow's migrations
                        self._ready = ready
                        return
                self.client()
            except Exception as err:
                _log.warning("cadence: could not prepare the MLflow spill store %s: %s", self.uri, err)
            finally:
                self._done_preparing()

        try:
            threading.Thread(target=prepare, name="cadence-mlflow-spill-prep", daemon=True).start()
        except RuntimeError:  # at interpreter shutdown no thread can start; `client` prepares it itself
            self._prepared = False
            self._done_preparing()

    def release_staging(self) -> None:
        """Remove the staging folder: now, or when a preparation still migrating a store in it ends.

        Removing it under a running migration made SQLite fail with "disk I/O error" (and a
        misleading warning) when a run whose server was slow at the end finished before it.
        """
        with self._staging_lock:
            self._released = True
            if self._preparing:
                return
        shutil.rmtree(self._staging, ignore_errors=True)

    def _done_preparing(self) -> None:
        with self._staging_lock:
            self._preparing = False
            released = self._released
        if released:
            shutil.rmtree(self._staging, ignore_errors=True)

    def open_offline(self, run_id: str | None, tags: Mapping[str, str], cause: BaseException) -> Run:
        """Create the run in the spill store, tagged with where it belongs (`run_id` when resuming)."""
        spill_tags = {**tags, TAG_KIND: "offline", TAG_TARGET_URI: self.tracking_uri,
                      TAG_TARGET_EXPERIMENT: self._experiment_name, TAG_TARGET_RUN: run_id or ""}  # fmt: skip
        try:
            client, experiment_id = self.client()
            created = client.create_run(experiment_id, run_name=self._run_name, tags=spill_tags)
        except Exception as local_error:
            raise RuntimeError(
                f"MLflow tracking at {self.tracking_uri} could not be reached ({short(cause)}) and the local spill "
                f"store {self.uri} could not be used either ({short(local_error)})"
            ) from local_error
        return Run(client, created.info.run_id, experiment_id, offline=True)

    def save(self, run: Run, rest: Remainder, spool: SpoolFiles) -> str:
        """Write `rest` into the store (plain JSONL if even that fails); the warning that says how to import it."""
        try:
            client, experiment_id = self.client()
            if run.offline:  # the spill store is the run's own store
                spill_run = run.run_id
            else:
                tags = {**rest.tags, TAG_KIND: "remainder", TAG_TARGET_URI: self.tracking_uri,
                        TAG_TARGET_EXPERIMENT: self._experiment_name, TAG_TARGET_RUN: run.run_id}  # fmt: skip
                spill_run = client.create_run(experiment_id, run_name=self._run_name, tags=tags).info.run_id
            write_run(client, spill_run, rest.points, rest.params, rest.tags, rest.artifacts, self._report)
            client.set_terminated(spill_run, rest.status, end_time=rest.end_ms)
        except Exception as err:
            return self._save_to_spool(run, rest, spool, err)
        self.stats["spilled_points"] += len(rest.points)
        spool.forget()
        spool.remove_folder()
        return (
            f"MLflow run {run.run_id} at {self.tracking_uri}: {len(rest.points)} metric points, the params, tags and "
            f"{len(rest.artifacts)} artifacts could not be confirmed as delivered ({rest.reason}). They are saved, "
            f"with the final status {rest.status}, in the local MLflow store {self.uri} (run {spill_run}). Import "
            f"them when the server is reachable with:\n    {self.import_hint}"
        )

    def _save_to_spool(self, run: Run, rest: Remainder, spool: SpoolFiles, err: BaseException) -> str:
        """Last resort when the SQLite store fails: plain JSONL that `import_spill` also reads."""
        try:
            spool.write_final(rest.points, {"params": rest.params, "tags": rest.tags, "status": rest.status})
        except OSError as disk_error:
            return (
                f"MLflow run {run.run_id}: {len(rest.points)} metric points could not be delivered ({rest.reason}) "
                f"nor saved locally ({err!r}; {disk_error!r}); they are lost"
            )
        self.stats["spilled_points"] += len(rest.points)
        return (
            f"MLflow run {run.run_id} at {self.tracking_uri}: {len(rest.points)} metric points could not be delivered "
            f"({rest.reason}) and the spill store {self.uri} failed ({short(err)}); they are saved as JSON lines "
            f"in {spool.folder}. Import them with:\n    {self.import_hint}"
        )
