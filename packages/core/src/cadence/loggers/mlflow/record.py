"""`RunRecord`: the run's params and tags under their MLflow keys, as the caller logged them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cadence.loggers.mlflow.limits import MAX_TAG_VALUE_LENGTH, _max_param_value_length, _truncate
from cadence.loggers.mlflow.names import _NameMap, flatten_params, stable_str
from cadence.loggers.mlflow.spill import PARAMS_ARTIFACT, TAG_PARAMS_HASH
from cadence.loggers.mlflow.state import Notices


class RunRecord:
    """Params and tags: sanitised keys, the values as sent and in full (for the params artifact and the spill).

    Written on the caller's thread. The sender reads `all_params` to write the params artifact,
    so the caller changes it only with `Shared.lock` held.
    """

    def __init__(self, notices: Notices):
        self._notices = notices
        self._param_names = _NameMap("param")
        self._tag_names = _NameMap("tag")
        self.params: dict[str, str] = {}  # what the run holds (or will): key -> value as sent
        self.all_params: dict[str, str] = {}  # key -> full value (the params artifact)
        self.all_tags: dict[str, str] = {}

    def add_tags(self, tags: Mapping[Any, Any]) -> dict[str, str]:
        """`tags` under MLflow keys, values as stable strings cut to 5000 characters; also kept in `all_tags`."""
        new = {}
        for raw, value in tags.items():
            key, message = self._tag_names(str(raw))
            if message:
                self._notices.warn_once("tag-name", str(raw), message)
            new[key] = _truncate(stable_str(value), MAX_TAG_VALUE_LENGTH)
        self.all_tags.update(new)
        return new

    def add_params(self, params: Mapping[str, Any], run_id: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """The params to send (keys new to the run) and the full values that changed (for `all_params`).

        A key the run already holds with another value is not sent (MLflow params are immutable);
        it warns once, and its full value still goes to the params artifact.
        """
        flat, duplicates = flatten_params(params)
        warn_once = self._notices.warn_once
        for key in duplicates:
            warn_once("param-dup", key, f"param {key!r} appears twice after flattening; the first is kept")
        limit = _max_param_value_length()
        new: dict[str, str] = {}
        changed: dict[str, str] = {}
        for raw, value in flat.items():
            key, message = self._param_names(raw)
            if message:
                warn_once("param-name", raw, message)
            full = stable_str(value)
            if self.all_params.get(key) != full:
                changed[key] = full
            sent = _truncate(full, limit)
            if sent != full:
                warn_once(
                    "param-long",
                    key,
                    f"param {key!r} is {len(full)} characters long, over MLflow's limit of {limit}; it is "
                    f"truncated in the run, and its full value is in the {PARAMS_ARTIFACT} artifact",
                )
            known = self.params.get(key)
            if known is None:
                self.params[key] = sent
                new[key] = sent
            elif known != sent:
                warn_once(
                    "param-changed",
                    f"{key}={sent}",
                    f"param {key!r} is already {known[:200]!r} in run {run_id}; the new value {sent[:200]!r} "
                    f"is not logged (MLflow params cannot change) but is recorded in {PARAMS_ARTIFACT}",
                )
        return new, changed

    def write_params_json(self, path: Path) -> str:
        """Write every full param value to `path` (the params artifact); its hash, also set in `all_tags`."""
        text = json.dumps(dict(sorted(self.all_params.items())), indent=1, sort_keys=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.all_tags[TAG_PARAMS_HASH] = digest
        return digest
