"""Tracking-store plumbing: clients, error classification, local store paths, experiments, timeouts."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

_log = logging.getLogger(__name__)


# MLflow helpers -------------------------------------------------------------------------------
def _mlflow_client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _error_code(err: BaseException) -> str | None:
    return getattr(err, "error_code", None) if type(err).__module__.startswith("mlflow") else None


_ITEM_ERRORS = {"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "MALFORMED_REQUEST", "INVALID_ARGUMENT"}


_RUN_ERRORS = {"RESOURCE_DOES_NOT_EXIST", "INVALID_STATE", "NOT_FOUND"}


def _classify(err: BaseException) -> str:
    """``"transient"`` (retry), ``"item"`` (the request's content is refused) or ``"run"`` (the run is gone)."""
    code = _error_code(err)
    if code is not None:
        if code in _ITEM_ERRORS:
            return "item"
        return "run" if code in _RUN_ERRORS else "transient"
    return "item" if isinstance(err, TypeError) else "transient"


def _local_store_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None."""
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite" or not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


def _is_local(uri: str) -> bool:
    return urlparse(uri).scheme in ("sqlite", "file", "")


def _sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def _get_or_create_experiment(client: Any, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location))
        except Exception as err:
            if _error_code(err) != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)  # another process created it meanwhile
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise _ConfigError(
            f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore "
            f"--experiment-id {experiment.experiment_id}) or choose another experiment_name"
        )
    return str(experiment.experiment_id)


def _artifact_location_for(uri: str) -> str | None:
    """Artifacts of a local SQLite store go next to the database, not into the current folder."""
    path = _local_store_path(uri)
    return (path.resolve().parent / "mlartifacts").as_uri() if path is not None else None


def _latest_steps(run: Any) -> dict[str, int]:
    return {m.key: int(m.step) for m in getattr(run.data, "_metric_objs", [])}


class _ConfigError(ValueError):
    """A configuration the user must fix (not an outage)."""


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


def _short(err: BaseException, limit: int = 300) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(directory: str | None, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _local_path(uri: str | None) -> Path | None:
    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(uri) if parsed.scheme == "" else None
