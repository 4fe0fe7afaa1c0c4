"""Where runs are stored, and reading them back (`MlflowClient`); writing goes through `MLFlowLogger`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cadence_harness.records import TAG, machine_name

__all__ = [
    "client",
    "finished_config_hashes",
    "finished_machines",
    "mark_failed",
    "resolve_tracking_uri",
    "search_runs",
]

DEFAULT_STORE = "mlflow.db"


def resolve_tracking_uri(uri: str | None = None) -> str:
    """`uri`, else ``$MLFLOW_TRACKING_URI``, else a SQLite file ``mlflow.db`` in the working directory.

    The result is absolute, so worker processes and later commands find the same store.
    """
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{Path.cwd() / DEFAULT_STORE}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    return uri


def client(uri: str | None = None) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=resolve_tracking_uri(uri))


def search_runs(mlflow_client: Any, experiment_names: list[str], status: str | None = "FINISHED") -> list[Any]:
    """Every harness run (it has a config hash tag) of the named experiments, all pages."""
    ids = []
    for name in experiment_names:
        experiment = mlflow_client.get_experiment_by_name(name)
        if experiment is not None:
            ids.append(experiment.experiment_id)
    if not ids:
        return []
    query = f"attributes.status = '{status}'" if status else ""
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs(ids, filter_string=query, max_results=1000, page_token=token)
        runs += [run for run in page if f"{TAG}config_hash" in run.data.tags]
        token = page.token
        if not token:
            return runs


def harness_experiments(mlflow_client: Any) -> list[str]:
    """Names of the experiments that hold at least one harness run."""
    names = []
    for experiment in mlflow_client.search_experiments():
        page = mlflow_client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`{TAG}config_hash` LIKE '%'", max_results=1
        )
        if page:
            names.append(experiment.name)
    return sorted(names)


def finished_config_hashes(uri: str, experiment: str) -> dict[str, str]:
    """``{config hash: run id}`` of the experiment's finished runs."""
    runs = search_runs(client(uri), [experiment])
    return {run.data.tags[f"{TAG}config_hash"]: run.info.run_id for run in runs}


def finished_machines(uri: str, experiment: str) -> dict[str, str]:
    """``{config hash: the machine its newest finished run ran on}`` (as `records.machine_name` spells it): the
    run the reading keeps of a configuration (`records.latest_per_config`) is its newest, so a configuration whose
    newest run ran elsewhere has no time this machine's runs can be compared with."""
    newest: dict[str, Any] = {}
    runs = search_runs(client(uri), [experiment])
    for run in sorted(runs, key=lambda run: (run.info.end_time or 0, run.info.run_id)):  # the newest last
        newest[run.data.tags[f"{TAG}config_hash"]] = run
    return {key: machine_name(run.data.params) for key, run in newest.items()}


def mark_failed(
    uri: str,
    *,
    run_id: str | None,
    experiment: str,
    run_name: str,
    tags: dict[str, str],
    error: str,
    log_file: Path | None = None,
    status: str = "FAILED",
) -> str:
    """Record a run that died without recording itself: attach to it (or create it) and end it `status` (FAILED,
    or KILLED when a grid was interrupted). A run that ended itself keeps its own status and error (a worker
    interrupted by Ctrl-C records KILLED before it exits); only the worker's log is added to it."""
    from cadence.loggers import MLFlowLogger

    running = True
    if run_id is not None:
        own = client(uri).get_run(run_id).info.status
        running = own == "RUNNING"
        if not running and log_file is None:
            return run_id
        status = status if running else own
        logger = MLFlowLogger(experiment_name=experiment, tracking_uri=uri, run_id=run_id)
    else:
        logger = MLFlowLogger(experiment_name=experiment, run_name=run_name, tracking_uri=uri, tags=tags)
    if running:
        logger.set_tags({f"{TAG}error": error[-4000:]})
    if log_file is not None and log_file.is_file():
        logger.log_artifact(log_file)
    logger.finish(status)  # a run that ended itself is ended again with its own status (the log delivered first)
    return logger.run_id
