"""Checkpoint files: atomic writes, a ``latest`` pointer, RNG capture, strict loads.

A checkpoint is a ``torch.save`` of plain containers and tensors, so it loads with
``weights_only=True``: loading one can never execute code.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "LATEST",
    "capture_rng",
    "find_latest",
    "list_checkpoints",
    "load_checkpoint",
    "restore_rng",
    "save_checkpoint",
]

LATEST = "latest.pt"
_NAME = re.compile(r"^ep(\d+)-ba(\d+)\.pt$")


def capture_rng() -> dict[str, Any]:
    """The state of every global random number generator of this process."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(payload: dict[str, Any], folder: str | Path, filename: str) -> Path:
    """Write `payload` to ``folder/filename`` atomically, then point ``latest.pt`` at it.

    A crash at any moment leaves either the previous checkpoint or the new one, never a
    torn file, and ``latest.pt`` only ever names a complete checkpoint.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / filename
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{filename}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    link_tmp = folder / f".{LATEST}.{os.getpid()}.tmp"
    link_tmp.unlink(missing_ok=True)
    os.symlink(filename, link_tmp)
    os.replace(link_tmp, folder / LATEST)
    _fsync_dir(folder)
    return target


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


def find_latest(folder: str | Path) -> Path | None:
    latest = Path(folder) / LATEST
    return latest.resolve() if latest.exists() else None


def list_checkpoints(folder: str | Path) -> list[Path]:
    """Checkpoints in `folder`, oldest first."""
    found = []
    for path in Path(folder).glob("ep*-ba*.pt"):
        match = _NAME.match(path.name)
        if match:
            found.append(((int(match.group(2)), int(match.group(1))), path))
    return [path for _, path in sorted(found)]


# What a run's checkpoint holds ---------------------------------------------------------
FORMAT_VERSION = 1


def _metric_states(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {"state": dict(metric.metric_state), "update_count": metric._update_count}
        for name, metric in metrics.items()
    }


def _restore_metric_states(metrics: dict[str, Any], saved: dict[str, Any]) -> None:
    for name, metric in metrics.items():
        if name in saved:
            for key, value in saved[name]["state"].items():
                setattr(metric, key, value.to(metric.device) if isinstance(value, torch.Tensor) else value)
            metric._update_count = saved[name]["update_count"]


def _named_states(objects: list[Any]) -> list[list[Any]]:
    return [[type(obj).__qualname__, obj.state_dict()] for obj in objects]


def _restore_named_states(objects: list[Any], saved: list[list[Any]], kind: str) -> None:
    import warnings

    waiting: dict[str, list[Any]] = {}
    for obj in objects:
        waiting.setdefault(type(obj).__qualname__, []).append(obj)
    for name, state in saved:
        if waiting.get(name):
            waiting[name].pop(0).load_state_dict(state)
        elif state:
            warnings.warn(
                f"the checkpoint holds state for {kind} {name}, which this run does not use; ignored", stacklevel=2
            )


def run_payload(state: Any, rng_by_rank: list[dict[str, Any]], scheduler_states: list[Any]) -> dict[str, Any]:
    """Everything needed to continue `state` exactly where it is."""
    return {
        "format": FORMAT_VERSION,
        "run_name": state.run_name,
        "rank_zero_seed": state.rank_zero_seed,
        "timestamp": state.timestamp.state_dict(),
        "model": state.model.state_dict(),
        "optimizers": [opt.state_dict() for opt in state.optimizers],
        "schedulers": scheduler_states,
        "scaler": state.scaler.state_dict() if state.scaler is not None else None,
        "algorithms": _named_states(state.algorithms),
        "callbacks": _named_states(state.callbacks),
        "train_metrics": _metric_states(state.train_metrics),
        "rng": rng_by_rank,
    }


def restore_run(state: Any, payload: dict[str, Any], schedulers: list[Any]) -> dict[str, Any] | None:
    """Load `payload` into `state` (strictly); return this rank's RNG states to restore last."""
    from cadence.time import Timestamp

    if payload.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint format {payload.get('format')!r} is not {FORMAT_VERSION}; it was written "
            "by an incompatible cadence version"
        )
    state.model.load_state_dict(payload["model"], strict=True)
    if len(payload["optimizers"]) != len(state.optimizers):
        raise ValueError(
            f"the checkpoint has {len(payload['optimizers'])} optimizer(s), this run "
            f"{len(state.optimizers)}; pass the same optimizers as the run that wrote it"
        )
    for optimizer, saved in zip(state.optimizers, payload["optimizers"]):
        optimizer.load_state_dict(saved)
    if len(payload["schedulers"]) != len(schedulers):
        raise ValueError(
            f"the checkpoint has {len(payload['schedulers'])} scheduler(s), this run "
            f"{len(schedulers)}; pass the same schedulers as the run that wrote it"
        )
    for scheduler, saved in zip(schedulers, payload["schedulers"]):
        scheduler.load_state_dict(saved)
    if state.scaler is not None and payload["scaler"] is not None:
        state.scaler.load_state_dict(payload["scaler"])
    state.timestamp = Timestamp.from_state_dict(payload["timestamp"])
    state.rank_zero_seed = payload["rank_zero_seed"]
    state.run_name = payload["run_name"]
    _restore_named_states(state.algorithms, payload["algorithms"], "method")
    _restore_named_states(state.callbacks, payload["callbacks"], "callback")
    _restore_metric_states(state.train_metrics, payload["train_metrics"])
    rng = payload["rng"]
    return rng[state.rank] if state.rank < len(rng) else None
