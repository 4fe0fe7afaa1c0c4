"""MLflow's request limits, and how points, params and tags are packed into `log_batch` requests within them."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Sequence

_log = logging.getLogger(__name__)


# MLflow's limits (mlflow.utils.validation); one request is one `log_batch` call.
MAX_METRICS_PER_REQUEST = 1000


MAX_PARAMS_PER_REQUEST = 100


MAX_TAGS_PER_REQUEST = 100


MAX_REQUEST_BYTES = 900_000  # MLflow rejects batches over 1 MB; keep room for the envelope


MAX_KEY_LENGTH = 250


MAX_TAG_VALUE_LENGTH = 5000  # the smallest limit of current and older servers


LEGACY_MAX_PARAM_VALUE_LENGTH = 500  # servers before MLflow 2.x


_TRUNCATED = "...[truncated]"


STATUSES = ("FINISHED", "FAILED", "KILLED")


_METRIC_OVERHEAD_BYTES = 100  # {"key": ..., "value": -1.2345678901234567e-300, "timestamp": ..., "step": ...}


_ENTRY_OVERHEAD_BYTES = 30  # {"key": ..., "value": ...}


class MLflowLoggerWarning(UserWarning):
    """Something about experiment tracking needs attention; training goes on regardless."""


def _truncate(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - len(_TRUNCATED)] + _TRUNCATED


def _entry_bytes(key: str, value: str) -> int:
    return len(json.dumps(key)) + len(json.dumps(value)) + _ENTRY_OVERHEAD_BYTES


def _metric_bytes(key: str) -> int:
    return len(json.dumps(key)) + _METRIC_OVERHEAD_BYTES


def _fit_metrics(points: Iterable[tuple[str, float, int, int]]) -> int:
    """How many leading points fit in one request."""
    count = size = 0
    for key, *_ in points:
        size += _metric_bytes(key)
        if count == MAX_METRICS_PER_REQUEST or (count and size > MAX_REQUEST_BYTES):
            break
        count += 1
    return count


def chunk_metrics(points: Sequence[tuple[str, float, int, int]]) -> list[list[tuple[str, float, int, int]]]:
    """Split ``(key, value, timestamp, step)`` points into requests within MLflow's limits."""
    chunks, start = [], 0
    while start < len(points):
        count = _fit_metrics(points[start : start + MAX_METRICS_PER_REQUEST])
        chunks.append(list(points[start : start + count]))
        start += count
    return chunks


def _fit_params_tags(params: Sequence[tuple[str, str]], tags: Sequence[tuple[str, str]]) -> tuple[int, int]:
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
        n_params, n_tags = _fit_params_tags(params, tags)
        chunks.append((params[:n_params], tags[:n_tags]))
        params, tags = params[n_params:], tags[n_tags:]
    return chunks


# Module helpers used by the logger and the importer -------------------------------------------
@functools.lru_cache(maxsize=1)
def _max_param_value_length() -> int:
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
    except ImportError:
        return LEGACY_MAX_PARAM_VALUE_LENGTH
    return int(MAX_PARAM_VAL_LENGTH)
