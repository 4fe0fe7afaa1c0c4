"""Opening the run: created (or re-attached) on the tracking server, else offline in the spill store."""

from __future__ import annotations

from typing import Any, NamedTuple

from cadence.loggers.mlflow.spill import TAG_KIND, TAG_TARGET_EXPERIMENT, TAG_TARGET_RUN, TAG_TARGET_URI
from cadence.loggers.mlflow.spill_writer import SpillWriter
from cadence.loggers.mlflow.state import Notices, RunTarget
from cadence.loggers.mlflow.store import (
    _artifact_location_for,
    _call_with_timeout,
    _ConfigError,
    _error_code,
    _get_or_create_experiment,
    _is_local,
    _latest_steps,
    _mlflow_client,
    _short,
)


class _Connection(NamedTuple):
    client: Any
    experiment_id: str
    run_id: str
    params: dict[str, str]
    latest_steps: dict[str, int]
    tags: dict[str, str]


def open_run(run: RunTarget, run_id: str | None, tags: dict[str, str], timeout_s: float, spill: SpillWriter,
             notices: Notices) -> _Connection | None:  # fmt: skip
    """Fill in `run`'s client and ids; returns the connection, or None when the run is logged offline.

    Through ``MlflowClient``, never the fluent global-run API, so several loggers can live in
    one process. A remote server gets `timeout_s` to answer; a run it creates later is deleted
    again. Raises ValueError for what the user must fix; any other failure means offline.
    """
    uri = run.tracking_uri

    def connect() -> _Connection:
        client = _mlflow_client(uri)
        if run_id is not None:
            existing = client.get_run(run_id)
            if existing.info.lifecycle_stage != "active":
                raise _ConfigError(f"MLflow run {run_id} is deleted; restore it or start a new run")
            if existing.info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            return _Connection(
                client,
                str(existing.info.experiment_id),
                run_id,
                dict(existing.data.params),
                _latest_steps(existing),
                existing.data.tags,
            )
        experiment_id = _get_or_create_experiment(client, run.experiment_name, _artifact_location_for(uri))
        created = client.create_run(experiment_id, run_name=run.run_name, tags=tags)
        return _Connection(client, experiment_id, created.info.run_id, {}, {}, {})

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
        _open_offline(run, run_id, tags, err, spill, notices)
        return None
    run.client, run.experiment_id, run.run_id = connection.client, connection.experiment_id, connection.run_id
    return connection


def _open_offline(run: RunTarget, run_id: str | None, tags: dict[str, str], err: BaseException,
                  spill: SpillWriter, notices: Notices) -> None:  # fmt: skip
    spill_tags = {
        **tags,
        TAG_KIND: "offline",
        TAG_TARGET_URI: run.tracking_uri,
        TAG_TARGET_EXPERIMENT: run.experiment_name,
        TAG_TARGET_RUN: run_id or "",
    }
    try:
        client, experiment_id = spill.client()
        created = client.create_run(experiment_id, run_name=run.run_name, tags=spill_tags)
    except Exception as local_error:
        raise RuntimeError(
            f"MLflow tracking at {run.tracking_uri} could not be reached ({_short(err)}) and the local spill "
            f"store {run.spill_uri} could not be used either ({_short(local_error)})"
        ) from local_error
    run.client, run.offline = client, True
    run.experiment_id, run.run_id = experiment_id, created.info.run_id
    notices.warn(
        f"MLflow tracking at {run.tracking_uri} could not be reached ({_short(err)}); this run is logged "
        f"offline to the local MLflow store {run.spill_uri} (run {run.run_id}). Import it when the server "
        f"is reachable with:\n    {run.import_hint}"
    )
