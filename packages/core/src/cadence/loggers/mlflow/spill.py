"""The spill store: what the logger could not deliver, kept locally and imported later.

python -m cadence.loggers.mlflow import <spill_dir> --tracking-uri <uri>
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cadence.loggers.mlflow.limits import STATUSES, MLflowLoggerWarning, chunk_metrics, chunk_params_tags
from cadence.loggers.mlflow.store import (
    _artifact_location_for,
    _error_code,
    _get_or_create_experiment,
    _join,
    _latest_steps,
    _local_path,
    _mlflow_client,
    _sqlite_uri,
)

_log = logging.getLogger(__name__)


IMPORT_COMMAND = "python -m cadence.loggers.mlflow import"


# Tags on runs in the spill store, read by `import_spill`.
TAG_KIND = "cadence.spill.kind"  # "remainder" (of a run on the server) or "offline" (the whole run)


TAG_TARGET_URI = "cadence.spill.target_tracking_uri"


TAG_TARGET_EXPERIMENT = "cadence.spill.target_experiment_name"


TAG_TARGET_RUN = "cadence.spill.target_run_id"


TAG_IMPORT_TARGET = "cadence.spill.import_target_run_id"


TAG_IMPORTED = "cadence.spill.imported"


PARAMS_ARTIFACT = "cadence/params.json"


TAG_PARAMS_HASH = "cadence.params_sha256"


_SPILL_DB = "spill.db"


class _Artifact:
    __slots__ = ("artifact_dir", "attempts", "local", "next_try")

    def __init__(self, local: Path, artifact_dir: str | None):
        self.local, self.artifact_dir = local, artifact_dir
        self.attempts, self.next_try = 0, 0.0


def _read_spool(path: Path, offset: int, limit: int | None) -> tuple[list[tuple[str, float, int, int]], int]:
    """Up to `limit` points of a spool file from byte `offset`, and the offset after them."""
    points: list[tuple[str, float, int, int]] = []
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


def _write_run(
    client: Any,
    run_id: str,
    points: Sequence[tuple[str, float, int, int]],
    params: Mapping[str, str],
    tags: Mapping[str, str],
    artifacts: Sequence[_Artifact] = (),
    warn: Callable[[str], None] | None = None,
) -> None:
    """Log everything into `run_id` in requests within MLflow's limits."""
    from mlflow.entities import Metric, Param, RunTag

    existing = client.get_run(run_id).data.params
    fresh_params = [(k, v) for k, v in params.items() if k not in existing]
    for key, value in params.items():
        if key in existing and existing[key] != value:
            message = f"param {key!r} of run {run_id} is {existing[key][:200]!r}, not {value[:200]!r}; kept as it is"
            if warn is not None:
                warn(message)
            else:
                warnings.warn(message, MLflowLoggerWarning, stacklevel=3)
    for chunk_params, chunk_tags in chunk_params_tags(fresh_params, list(tags.items())):
        client.log_batch(
            run_id, params=[Param(k, v) for k, v in chunk_params], tags=[RunTag(k, v) for k, v in chunk_tags]
        )
    for chunk in chunk_metrics(points):
        client.log_batch(run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in chunk])
    for artifact in artifacts:
        if artifact.local.is_dir():
            client.log_artifacts(
                run_id, str(artifact.local), artifact_path=_join(artifact.artifact_dir, artifact.local.name)
            )
        elif artifact.local.exists():
            client.log_artifact(run_id, str(artifact.local), artifact_path=artifact.artifact_dir)


# Import ---------------------------------------------------------------------------------------
def import_spill(spill: str | Path, tracking_uri: str | None = None) -> dict[str, str]:
    """Send what `MLFlowLogger` could not deliver to a tracking server; returns ``{source: target run id}``.

    `spill` is a logger's ``spill_dir`` (or its ``spill.db``). Each run in the spill store is
    merged into the run it belongs to (or, for a run logged offline, into a new run of the same
    experiment) at `tracking_uri` (default: the URI the logger was using). Metric points keep
    their timestamps and steps, so importing twice adds nothing to SQL-backed stores; an
    imported run is marked and skipped afterwards. Leftover spool files are imported too.
    """
    from mlflow.entities import ViewType

    spill = Path(spill)
    database = spill if spill.suffix == ".db" else spill / _SPILL_DB
    root = database.parent
    results: dict[str, str] = {}
    for folder in sorted(p.parent for p in root.glob("spool/*/meta.json")):
        results[str(folder)] = _import_spool(folder, tracking_uri)
    if not database.exists():
        if not results:
            raise FileNotFoundError(f"no spill store at {database} and no spool files under {root / 'spool'}")
        return results
    local = _mlflow_client(_sqlite_uri(database))
    for experiment in local.search_experiments(view_type=ViewType.ALL):
        page_token = None
        while True:
            runs = local.search_runs([experiment.experiment_id], page_token=page_token, max_results=1000)
            for run in runs:
                if TAG_KIND in run.data.tags:
                    results[run.info.run_id] = _import_run(local, run, tracking_uri)
            page_token = runs.token
            if not page_token:
                break
    return results


def _target_uri(tracking_uri: str | None, recorded: str | None) -> str:
    uri = tracking_uri or recorded or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise ValueError("no tracking URI to import into; pass tracking_uri (--tracking-uri)")
    return uri


def _find_run(client: Any, run_id: str | None) -> Any:
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except Exception as err:
        if _error_code(err) == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return run if run.info.lifecycle_stage == "active" else None


def _import_run(local: Any, run: Any, tracking_uri: str | None) -> str:
    tags = run.data.tags
    uri = _target_uri(tracking_uri, tags.get(TAG_TARGET_URI))
    imported = tags.get(TAG_IMPORTED, "")
    if imported.endswith(f" {uri}"):
        return imported.split(" ", 1)[0]
    remote = _mlflow_client(uri)
    target = _find_run(remote, tags.get(TAG_IMPORT_TARGET)) or _find_run(remote, tags.get(TAG_TARGET_RUN))
    user_tags = {k: v for k, v in tags.items() if not k.startswith(("cadence.spill.", "mlflow."))}
    if target is None:
        name = tags.get(TAG_TARGET_EXPERIMENT) or "cadence"
        experiment_id = _get_or_create_experiment(remote, name, _artifact_location_for(uri))
        target = remote.create_run(
            experiment_id, start_time=run.info.start_time, run_name=run.info.run_name, tags=user_tags
        )
        local.set_tag(run.info.run_id, TAG_IMPORT_TARGET, target.info.run_id)
    target_id = target.info.run_id
    points = [
        (m.key, float(m.value), int(m.timestamp), int(m.step))
        for key in run.data.metrics
        for m in local.get_metric_history(run.info.run_id, key)
    ]
    if tags.get(TAG_KIND) == "offline" and tags.get(TAG_TARGET_RUN):
        points = _after_latest(points, _latest_steps(remote.get_run(target_id)))  # an offline resume segment
    _write_run(remote, target_id, points, run.data.params, user_tags)
    artifact_dir = _local_path(run.info.artifact_uri)
    if artifact_dir is not None and artifact_dir.is_dir() and any(artifact_dir.iterdir()):
        remote.log_artifacts(target_id, str(artifact_dir))
    if run.info.status in STATUSES:
        remote.set_terminated(target_id, run.info.status, end_time=run.info.end_time)
    local.set_tag(run.info.run_id, TAG_IMPORTED, f"{target_id} {uri}")
    return target_id


def _after_latest(points: list[tuple[str, float, int, int]], latest: Mapping[str, int]) -> list[Any]:
    return [p for p in points if p[3] > latest.get(p[0], -(2**63))]


def _import_spool(folder: Path, tracking_uri: str | None) -> str:
    meta = json.loads((folder / "meta.json").read_text())
    uri = meta["tracking_uri"] if meta.get("offline") else _target_uri(tracking_uri, meta.get("tracking_uri"))
    client = _mlflow_client(uri)
    points: list[tuple[str, float, int, int]] = []
    for path in sorted(folder.glob("*.jsonl")):
        points.extend(_read_spool(path, 0, None)[0])
    run_id = meta["run_id"]
    _write_run(client, run_id, points, meta.get("params", {}), meta.get("tags", {}))
    if meta.get("status") in STATUSES:
        client.set_terminated(run_id, meta["status"])
    shutil.rmtree(folder)
    return str(run_id)


def resume_run_id(checkpoint: str | Path) -> str | None:
    """The MLflow run id a cadence checkpoint was written under (None if it has none).

    `checkpoint` is a checkpoint file or a ``save_folder`` (its latest checkpoint). To keep one
    MLflow run across a crash and resume::

        run_id = resume_run_id(save_folder) if autoresume else None
        from cadence.loggers.mlflow.logger import MLFlowLogger  # the logger replays the spool

        logger = MLFlowLogger(experiment_name, run_id=run_id)
        Trainer(..., loggers=[logger], save_folder=save_folder, autoresume=autoresume)
    """
    from cadence import checkpoint as ckpt

    path = Path(checkpoint)
    if path.is_dir():
        latest = ckpt.find_latest(path)
        if latest is None:
            return None
        path = latest
    if not path.exists():
        return None
    for name, state in ckpt.load_checkpoint(path).get("callbacks", []):
        if name == "MLFlowLogger" and isinstance(state, dict) and state.get("run_id"):
            return str(state["run_id"])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cadence.loggers.mlflow", description="Tools for runs logged by cadence's MLFlowLogger."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("import", help="send a spill folder's runs and points to a tracking server")
    command.add_argument("spill", help="the logger's spill_dir (or its spill.db)")
    command.add_argument("--tracking-uri", default=None, help="default: the URI each run was logged to")
    args = parser.parse_args(argv)
    for source, target in import_spill(args.spill, args.tracking_uri).items():
        print(f"{source} -> run {target}")
    return 0
