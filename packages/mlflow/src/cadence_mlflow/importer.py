"""Importing a spill into a tracking store (``python -m cadence_mlflow import``), and finding a run to resume."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cadence.loggers import STATUSES
from cadence_mlflow.names import Point
from cadence_mlflow.spill import (
    IMPORT_COMMAND,
    SPILL_DB,
    TAG_IMPORT_TARGET,
    TAG_IMPORTED,
    TAG_KIND,
    TAG_TARGET_EXPERIMENT,
    TAG_TARGET_RUN,
    TAG_TARGET_URI,
    read_spool,
)
from cadence_mlflow.tracking import (
    artifact_location_for,
    error_code,
    get_or_create_experiment,
    latest_steps,
    local_path,
    mlflow_client,
    sqlite_uri,
    write_run,
)


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
    database = spill if spill.suffix == ".db" else spill / SPILL_DB
    root = database.parent
    results: dict[str, str] = {}
    for folder in sorted(p.parent for p in root.glob("spool/*/meta.json")):
        results[str(folder)] = _import_spool(folder, tracking_uri)
    if not database.exists():
        if not results:
            raise FileNotFoundError(f"no spill store at {database} and no spool files under {root / 'spool'}")
        return results
    local = mlflow_client(sqlite_uri(database))
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
        if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return run if run.info.lifecycle_stage == "active" else None


def _import_run(local: Any, run: Any, tracking_uri: str | None) -> str:
    tags = run.data.tags
    uri = _target_uri(tracking_uri, tags.get(TAG_TARGET_URI))
    imported = tags.get(TAG_IMPORTED, "")
    if imported.endswith(f" {uri}"):
        return imported.split(" ", 1)[0]
    remote = mlflow_client(uri)
    target = _find_run(remote, tags.get(TAG_IMPORT_TARGET)) or _find_run(remote, tags.get(TAG_TARGET_RUN))
    user_tags = {k: v for k, v in tags.items() if not k.startswith(("cadence.spill.", "mlflow."))}
    if target is None:
        name = tags.get(TAG_TARGET_EXPERIMENT) or "cadence"
        experiment_id = get_or_create_experiment(remote, name, artifact_location_for(uri))
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
        points = _after_latest(points, latest_steps(remote.get_run(target_id)))  # an offline resume segment
    write_run(remote, target_id, points, run.data.params, user_tags)
    artifact_dir = local_path(run.info.artifact_uri)
    if artifact_dir is not None and artifact_dir.is_dir() and any(artifact_dir.iterdir()):
        remote.log_artifacts(target_id, str(artifact_dir))
    if run.info.status in STATUSES:
        remote.set_terminated(target_id, run.info.status, end_time=run.info.end_time)
    local.set_tag(run.info.run_id, TAG_IMPORTED, f"{target_id} {uri}")
    return target_id


def _after_latest(points: list[Point], latest: Mapping[str, int]) -> list[Point]:
    return [p for p in points if p[3] > latest.get(p[0], -(2**63))]


def _import_spool(folder: Path, tracking_uri: str | None) -> str:
    meta = json.loads((folder / "meta.json").read_text())
    uri = meta["tracking_uri"] if meta.get("offline") else _target_uri(tracking_uri, meta.get("tracking_uri"))
    client = mlflow_client(uri)
    points: list[Point] = []
    for path in sorted(folder.glob("*.jsonl")):
        points.extend(read_spool(path, 0, None)[0])
    run_id = meta["run_id"]
    write_run(client, run_id, points, meta.get("params", {}), meta.get("tags", {}))
    if meta.get("status") in STATUSES:
        client.set_terminated(run_id, meta["status"])
    shutil.rmtree(folder)
    return str(run_id)


def resume_run_id(checkpoint: str | Path) -> str | None:
    """The MLflow run id a cadence checkpoint was written under (None if it has none).

    `checkpoint` is a checkpoint file or a ``save_folder``: there, the checkpoint autoresume
    continues from (the newest that loads, whatever ``latest.pt`` says). To keep one MLflow run
    across a crash and resume::

        run_id = resume_run_id(save_folder) if autoresume else None
        logger = MLFlowLogger(experiment_name, run_id=run_id)  # the logger replays the spool
        Trainer(..., loggers=[logger], save_folder=save_folder, autoresume=autoresume)
    """
    from cadence.checkpoint import find_resumable, load_run_checkpoint

    path = Path(checkpoint)
    if path.is_dir():
        found = find_resumable(path)
        if found is None:
            return None
        payload = found[1]
    elif path.exists():
        payload = load_run_checkpoint(path)
    else:
        return None
    for name, state in payload.get("callbacks", []):
        if name == "MLFlowLogger" and isinstance(state, dict) and state.get("run_id"):
            return str(state["run_id"])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cadence_mlflow import <spill_dir> --tracking-uri <uri>``."""
    parser = argparse.ArgumentParser(
        prog=IMPORT_COMMAND.rsplit(" ", 1)[0], description="Tools for runs logged by cadence's MLFlowLogger."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("import", help="send a spill folder's runs and points to a tracking server")
    command.add_argument("spill", help="the logger's spill_dir (or its spill.db)")
    command.add_argument("--tracking-uri", default=None, help="default: the URI each run was logged to")
    args = parser.parse_args(argv)
    for source, target in import_spill(args.spill, args.tracking_uri).items():
        print(f"{source} -> run {target}")
    return 0
