"""What MLflow accepts and what the caller is told: keys, stable values, params and tags as logged, warnings."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import logging
import os
import re
import sys
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

import torch

# MLflow's limits (mlflow.utils.validation); one request is one `log_batch` call.
MAX_METRICS_PER_REQUEST = 1000
MAX_KEY_LENGTH = 250
MAX_TAG_VALUE_LENGTH = 5000  # the smallest limit of current and older servers
LEGACY_MAX_PARAM_VALUE_LENGTH = 500  # servers before MLflow 2.x

PARAMS_ARTIFACT = "cadence/params.json"  # every param's full value
TAG_PARAMS_HASH = "cadence.params_sha256"  # the hash of that artifact

_log = logging.getLogger(__name__)
_PACKAGE = str(PurePath(__file__).parent) + os.sep
_TRUNCATED = "...[truncated]"
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")

Point = tuple[str, float, int, int]  # (key, value, timestamp, step), as MLflow stores a metric point


# Warnings for the caller ---------------------------------------------------------------------
class MLflowLoggerWarning(UserWarning):
    """Something about experiment tracking needs attention; training goes on regardless."""


class Notices:
    """Warnings for the caller, as `MLflowLoggerWarning`; those of the background threads wait for its next call."""

    def __init__(self) -> None:
        self.deferred: deque[str] = deque()  # the background threads' warnings, not issued yet
        self._warned: set[tuple[str, str]] = set()

    def warn(self, message: str) -> None:
        """Warn on the caller's thread; a warnings filter set to "error" must not raise into training."""
        try:
            warnings.warn(message, MLflowLoggerWarning, stacklevel=_outside_level())
        except Exception:
            _log.warning("%s", message)

    def warn_once(self, kind: str, key: str, message: str) -> None:
        if (kind, key) not in self._warned:
            self._warned.add((kind, key))
            self.warn(message)

    def defer(self, message: str) -> None:
        """From the background threads: the warning is issued at the caller's next call."""
        self.deferred.append(message)

    def emit(self) -> None:
        while self.deferred:
            try:
                message = self.deferred.popleft()
            except IndexError:
                return
            self.warn(message)


def _outside_level() -> int:
    """The `stacklevel` of the first frame outside this package, so that a warning points at the caller's code."""
    frame, level = sys._getframe(2), 2  # level 1 is `Notices.warn`, level 2 its caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


# Names ----------------------------------------------------------------------------------------
def sanitize_name(name: str) -> str:
    """The MLflow-valid key for `name`: the same on every platform, every process and every call.

    Characters other than ASCII letters, digits, ``_ - . /`` and space become ``_`` (so
    ``:`` ``@`` ``(`` ``,`` do), empty path segments are dropped, ``.``/``..`` segments become
    underscores, and names over 250 characters are cut and end in a hash of the full name.
    """
    cleaned = _INVALID_CHARS.sub("_", name)
    parts = [("_" * len(part) if part in (".", "..") else part) for part in cleaned.split("/") if part]
    cleaned = "/".join(parts) or "_"
    if len(cleaned) > MAX_KEY_LENGTH:
        cleaned = f"{cleaned[: MAX_KEY_LENGTH - 9]}_{_digest(name)}"
    return cleaned


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


class NameMap:
    """Raw name -> MLflow key, remembering every mapping so that two names never share a key."""

    def __init__(self, kind: str):
        self.kind = kind
        self._keys: dict[str, str] = {}
        self._owners: dict[str, str] = {}

    def __call__(self, raw: str) -> tuple[str, str | None]:
        """The key for `raw`, and a message the first time it differs from `raw`."""
        key = self._keys.get(raw)
        if key is not None:
            return key, None
        base = sanitize_name(raw)
        key, message = base, None
        owner = self._owners.get(base)
        if owner is not None and owner != raw:
            key = f"{base[: MAX_KEY_LENGTH - 9]}_{_digest(raw)}"
            message = (
                f"{self.kind} name {raw!r} maps to {base!r}, which {owner!r} already uses; "
                f"logging it as {key!r} instead"
            )
        elif key != raw:
            message = f"{self.kind} name {raw!r} is not a valid MLflow key; logging it as {key!r}"
        self._owners[key] = raw
        self._keys[raw] = key
        return key, message


# Values ---------------------------------------------------------------------------------------
def truncate(value: str, limit: int) -> str:
    """`value` cut to `limit` characters, ending in a marker when it was cut."""
    return value if len(value) <= limit else value[: limit - len(_TRUNCATED)] + _TRUNCATED


@functools.lru_cache(maxsize=1)
def max_param_value_length() -> int:
    """The longest param value the installed MLflow accepts."""
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
    except ImportError:
        return LEGACY_MAX_PARAM_VALUE_LENGTH
    return int(MAX_PARAM_VAL_LENGTH)


def _jsonable(value: Any) -> Any:
    """A JSON-ready, process-independent form of `value` (no memory addresses, sorted sets)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist() if value.numel() <= 64 else f"Tensor(shape={list(value.shape)})"
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, functools.partial):
        return {"partial": _jsonable(value.func), "args": _jsonable(value.args), "kwargs": _jsonable(value.keywords)}
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    item = getattr(value, "item", None)  # NumPy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        with contextlib.suppress(Exception):
            return item()
    return _ADDRESS.sub("", repr(value))


def stable_str(value: Any) -> str:
    """``str()`` that gives the same text for the same configuration in every process."""
    if isinstance(value, str):
        return value
    converted = _jsonable(value)
    if isinstance(converted, str):
        return converted
    if converted is None or isinstance(converted, (bool, int, float)):
        return str(converted)
    return json.dumps(converted, sort_keys=True)


def flatten_params(params: Mapping[str, Any], sep: str = "/") -> tuple[dict[str, Any], list[str]]:
    """Nested mappings (and dataclasses) as one level of ``a/b/c`` keys; also the keys seen twice."""
    flat: dict[str, Any] = {}
    duplicates: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping) and value and prefix is not None:
            for key, child in value.items():
                walk(f"{prefix}{sep}{key}" if prefix else str(key), child)
            return
        if prefix in flat:
            duplicates.append(prefix)
            return
        flat[prefix] = value

    for key, value in params.items():
        walk(str(key), value)
    return flat, duplicates


# A run's params and tags ------------------------------------------------------------------------
class ParamsAndTags:
    """A run's params and tags under their MLflow keys, as the caller logged them (the caller's thread only).

    `params` holds the values as sent (what the run holds, or will), `full_params` the full
    values (the params artifact), `tags` every tag set (the spill's copy of the run).
    """

    def __init__(self, warn_once: Callable[[str, str, str], None]):
        self._warn_once = warn_once
        self._param_names, self._tag_names = NameMap("param"), NameMap("tag")
        self.params: dict[str, str] = {}
        self.full_params: dict[str, str] = {}
        self.tags: dict[str, str] = {}

    def add_tags(self, tags: Mapping[Any, Any]) -> dict[str, str]:
        """`tags` under MLflow keys, values as stable strings cut to 5000 characters."""
        new = {}
        for raw, value in tags.items():
            key, message = self._tag_names(str(raw))
            if message:
                self._warn_once("tag-name", str(raw), message)
            new[key] = truncate(stable_str(value), MAX_TAG_VALUE_LENGTH)
        self.tags.update(new)
        return new

    def add_params(self, params: Mapping[str, Any], run_id: str | None) -> tuple[dict[str, str], bool]:
        """The params to send (keys new to the run), and whether a full value changed.

        A key the run already holds with another value is not sent (MLflow params are immutable);
        it warns once, and its full value still goes to the params artifact.
        """
        flat, duplicates = flatten_params(params)
        warn_once = self._warn_once
        for key in duplicates:
            warn_once("param-dup", key, f"param {key!r} appears twice after flattening; the first is kept")
        limit = max_param_value_length()
        new: dict[str, str] = {}
        changed = False
        for raw, value in flat.items():
            key, message = self._param_names(raw)
            if message:
                warn_once("param-name", raw, message)
            full = stable_str(value)
            changed = changed or self.full_params.get(key) != full
            self.full_params[key] = full
            sent = truncate(full, limit)
            if sent != full:
                warn_once("param-long", key, f"param {key!r} is {len(full)} characters long, over MLflow's limit of "
                          f"{limit}; it is truncated in the run, and its full value is in the {PARAMS_ARTIFACT} "
                          f"artifact")  # fmt: skip
            known = self.params.get(key)
            if known is None:
                self.params[key] = new[key] = sent
            elif known != sent:
                warn_once("param-changed", f"{key}={sent}", f"param {key!r} is already {known[:200]!r} in run "
                          f"{run_id}; the new value {sent[:200]!r} is not logged (MLflow params cannot change) but "
                          f"is recorded in {PARAMS_ARTIFACT}")  # fmt: skip
        return new, changed

    def params_json(self) -> str:
        """The params artifact's text; its hash is set in the tags."""
        text = json.dumps(dict(sorted(self.full_params.items())), indent=1, sort_keys=True)
        self.tags[TAG_PARAMS_HASH] = hashlib.sha256(text.encode()).hexdigest()
        return text
