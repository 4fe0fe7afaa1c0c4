"""Names and values MLflow accepts: deterministic sanitisation, stable strings, flattened params."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import torch

from cadence.loggers.mlflow.limits import MAX_KEY_LENGTH

_log = logging.getLogger(__name__)


# Pure helpers ---------------------------------------------------------------------------------
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


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


class _NameMap:
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
