"""Talking to a tracking store through ``MlflowClient``: opening a run, writing one, and what its errors mean.

Never the fluent global-run API, so several loggers can live in one process. mlflow is
imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cadence_mlflow.names import MAX_METRICS_PER_REQUEST, MLflowLoggerWarning, Point

# MLflow's request limits (mlflow.utils.validation); one request is one `log_batch` call.
MAX_PARAMS_PER_REQUEST = 100
MAX_TAGS_PER_REQUEST = 100
MAX_REQUEST_BYTES = 900_000  # MLflow rejects batches over 1 MB; keep room for the envelope
_METRIC_OVERHEAD_BYTES = 100  # {"key": ..., "value": -1.2345678901234567e-300, "timestamp": ..., "step": ...}
_ENTRY_OVERHEAD_BYTES = 30  # {"key": ..., "value": ...}
_ITEM_ERRORS = {"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "MALFORMED_REQUEST", "INVALID_ARGUMENT"}
_RUN_ERRORS = {"RESOURCE_DOES_NOT_EXIST", "INVALID_STATE", "NOT_FOUND"}


@dataclass(frozen=True)
class Run:
    """The run a logger writes to: its store's client and ids; `offline` when that store is the local spill store."""

    client: Any
    run_id: str
    experiment_id: str
    offline: bool = False


@dataclass(frozen=True)
class Opened:
    """A run opened on the tracking server, and what it already holds (a resumed run continues where it stopped)."""

    run: Run
    params: dict[str, str]
    latest_steps: dict[str, int]
    tags: dict[str, str]


@dataclass(eq=False)
class Artifact:
    """A staged copy of a logged file or folder, uploaded under `artifact_dir` of the run; its retry schedule."""

    local: Path
    artifact_dir: str | None
    attempts: int = 0
    next_try: float = 0.0

    @property
    def target(self) -> str:
        return f"{self.artifact_dir}/{self.local.name}" if self.artifact_dir else self.local.name


class ConfigError(ValueError):
    """A configuration the user must fix (not an outage)."""


class Unreachable(Exception):
    """The tracking store did not answer (or failed) while the run was opened: log offline instead."""

    def __init__(self, cause: BaseException):
        super().__init__(short(cause))
        self.cause = cause


# Stores and errors ----------------------------------------------------------------------------
def mlflow_client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def error_code(err: BaseException) -> str | None:
    return getattr(err, "error_code", None) if type(err).__module__.startswith("mlflow") else None


def classify(err: BaseException) -> str:
    """``"transient"`` (retry), ``"item"`` (the request's content is refused) or ``"run"`` (the run is gone)."""
    code = error_code(err)
    if code is not None:
        if code in _ITEM_ERRORS:
            return "item"
        return "run" if code in _RUN_ERRORS else "transient"
    return "item" if isinstance(err, TypeError) else "transient"


def short(err: BaseException, limit: int = 300) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def local_path(uri: str | None) -> Path | None:
    """The folder of a ``file:`` (or plain path) URI, else None."""
    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(uri) if parsed.scheme == "" else None


def artifact_location_for(uri: str) -> str | None:
    """Artifacts of a local SQLite store go next to the database, not into the current folder."""
    if urlparse(uri).scheme != "sqlite" or not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///") :]).resolve().parent / "mlartifacts").as_uri()


def get_or_create_experiment(client: Any, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location))
        except Exception as err:
            if error_code(err) != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)  # another process created it meanwhile
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise ConfigError(
            f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore "
            f"--experiment-id {experiment.experiment_id}) or choose another experiment_name"
        )
    return str(experiment.experiment_id)


def latest_steps(run: Any) -> dict[str, int]:
    return {m.key: int(m.step) for m in getattr(run.data, "_metric_objs", [])}


# Opening a run --------------------------------------------------------------------------------
def open_run(uri: str, experiment_name: str, run_name: str | None, run_id: str | None, tags: dict[str, str],
             timeout_s: float) -> Opened:  # fmt: skip
    """Create the run (or re-attach to `run_id`, marking it RUNNING again).

    A remote server gets `timeout_s` to answer; a run it creates later is deleted again.
    Raises ValueError for what the user must fix, `Unreachable` for anything else.
    """

    def connect() -> Opened:
        client = mlflow_client(uri)
        if run_id is not None:
            existing = client.get_run(run_id)
            if existing.info.lifecycle_stage != "active":
                raise ConfigError(f"MLflow run {run_id} is deleted; restore it or start a new run")
            if existing.info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            run = Run(client, run_id, str(existing.info.experiment_id))
            return Opened(run, dict(existing.data.params), latest_steps(existing), existing.data.tags)
        experiment_id = get_or_create_experiment(client, experiment_name, artifact_location_for(uri))
        created = client.create_run(experiment_id, run_name=run_name, tags=tags)
        return Opened(Run(client, created.info.run_id, experiment_id), {}, {}, {})

    def forget(late: Opened) -> None:  # the run was created after we gave up: hide it
        if run_id is None:
            late.run.client.delete_run(late.run.run_id)

    local = urlparse(uri).scheme in ("sqlite", "file", "")
    try:
        return _call_with_timeout(connect, None if local else timeout_s, forget)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    except Exception as err:
        if error_code(err) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST"):
            raise ValueError(f"MLflow refused the run setup at {uri}: {err}") from err
        raise Unreachable(err) from err


def _call_with_timeout(fn: Callable[[], Any], timeout_s: float | None, on_late: Callable[[Any], None]) -> Any:
    """``fn()`` in a helper thread, abandoned after `timeout_s`; a late result goes to `on_late`."""
    if timeout_s is None:
        return fn()
    lock, done = threading.Lock(), threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            result, error = fn(), None
        except BaseException as err:
            result, error = None, err
        with lock:
            box.update(result=result, error=error)
            late = box.get("abandoned", False)
        done.set()
        if late and error is None:
            with contextlib.suppress(Exception):
                on_late(result)

    threading.Thread(target=target, name="cadence-mlflow-connect", daemon=True).start()
    done.wait(timeout_s)
    with lock:
        if "result" not in box:
            box["abandoned"] = True
            raise TimeoutError(f"no answer within {timeout_s:g} s")
    if box["error"] is not None:
        raise box["error"]
    return box["result"]


# Requests within MLflow's limits -------------------------------------------------------------------------------------
def _entry_bytes(key: str, value: str) -> int:
    return len(json.dumps(key)) + len(json.dumps(value)) + _ENTRY_OVERHEAD_BYTES


def fit_metrics(points: Iterable[Point]) -> int:
    """How many leading points fit in one request."""
    count = size = 0
    for key, *_ in points:
        size += len(json.dumps(key)) + _METRIC_OVERHEAD_BYTES
        if count == MAX_METRICS_PER_REQUEST or (count and size > MAX_REQUEST_BYTES):
            break
        count += 1
    return count


def chunk_metrics(points: Sequence[Point]) -> list[list[Point]]:
    """Split ``(key, value, timestamp, step)`` points into requests within MLflow's limits."""
    chunks, start = [], 0
    while start < len(points):
        count = fit_metrics(points[start : start + MAX_METRICS_PER_REQUEST])
        chunks.append(list(points[start : start + count]))
        start += count
    return chunks


def fit_params_tags(params: Sequence[tuple[str, str]], tags: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """How many leading params and tags fit in one request (at least one item when any are given)."""
    size = n_params = n_tags = 0
    for key, value in params[:MAX_PARAMS_PER_REQUEST]:
        size += _entry_bytes(key, value)
        if n_params and size > MAX_REQUEST_BYTES:
            return n_params, 0
        n_params += 1
    for key, value in tags[:MAX_TAGS_PER_REQUEST]:
        size += _entry_bytes(key, value)
        if (n_params or n_tags) and size > MAX_REQUEST_BYTES:
            break
        n_tags += 1
    return n_params, n_tags


def chunk_params_tags(
    params: Sequence[tuple[str, str]], tags: Sequence[tuple[str, str]] = ()
) -> list[tuple[list[tuple[str, str]], list[tuple[str, str]]]]:
    """Split params and tags into requests within MLflow's limits."""
    chunks = []
    params, tags = list(params), list(tags)
    while params or tags:
        n_params, n_tags = fit_params_tags(params, tags)
        chunks.append((params[:n_params], tags[:n_tags]))
        params, tags = params[n_params:], tags[n_tags:]
    return chunks


# Writing a run --------------------------------------------------------------------------------
def upload_artifact(client: Any, run_id: str, artifact: Artifact) -> None:
    local = artifact.local
    if local.is_dir():
        client.log_artifacts(run_id, str(local), artifact_path=artifact.target)
    elif local.exists():
        client.log_artifact(run_id, str(local), artifact_path=artifact.artifact_dir)


def write_run(client: Any, run_id: str, points: Sequence[Point], params: Mapping[str, str], tags: Mapping[str, str],
              artifacts: Sequence[Artifact] = (), warn: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Log everything into `run_id` in requests within MLflow's limits (params the run holds are kept)."""
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
        upload_artifact(client, run_id, artifact)
