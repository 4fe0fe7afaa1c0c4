"""What a checkpoint holds: everything needed to continue a run exactly, and restoring it strictly.

`run_payload` gathers the model, optimizers, schedulers, grad scaler, timestamp, every method's
and callback's ``state_dict``, metric states and the RNG states of every rank. `restore_run`
loads it into a `State` and raises `CheckpointMismatchError` (naming the part and the fix) when
the checkpoint does not fit this run: another model shape, another optimizer, other schedulers.
`save_run` writes it: one file from rank 0, or, for a model sharded with FSDP, a folder from every
rank (`cadence._sharded_checkpoint`), which `restore_run` loads into any number of processes.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cadence import _sharded_checkpoint as sharded
from cadence import checkpoint as ckpt
from cadence import distributed as dist
from cadence._sharding import is_sharded
from cadence.algorithm import as_algorithm
from cadence.checkpoint import CheckpointError, CheckpointNames
from cadence.state import State
from cadence.time import Timestamp

__all__ = [
    "FORMAT_VERSION",
    "CheckpointMismatchError",
    "capture_rng",
    "restore_rng",
    "restore_run",
    "restore_weights",
    "run_payload",
    "save_run",
    "seed_all",
]

FORMAT_VERSION = 1


class CheckpointMismatchError(CheckpointError):
    """A checkpoint that loads but does not fit this run (model, optimizers, schedulers)."""


def seed_all(seed: int) -> None:
    """Seed Python, NumPy (when installed) and torch (every device)."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed % 2**32)


def capture_rng() -> dict[str, Any]:
    """The state of every global random number generator of this process."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        legacy: Any = np.random.get_state()  # the MT19937 tuple (numpy's stubs also allow its dict form)
        kind, keys, pos, has_gauss, cached = legacy
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


def _algorithm_states(algorithms: list[Any]) -> list[list[Any]]:
    """Each method's state under its own class name; a duck-typed one's through `as_algorithm` (Composer's default
    when it has no ``state_dict``: its repr)."""
    return [[type(obj).__qualname__, as_algorithm(obj).state_dict()] for obj in algorithms]


def _restore_named_states(
    objects: list[Any], saved: list[list[Any]], kind: str, view: Callable[[Any], Any] = lambda obj: obj
) -> None:
    waiting: dict[str, list[Any]] = {}
    for obj in objects:
        waiting.setdefault(type(obj).__qualname__, []).append(obj)
    for name, state in saved:
        if waiting.get(name):
            view(waiting[name].pop(0)).load_state_dict(state)
        elif set(state) - {"repr"}:  # a stateless method saves only its repr (Composer's default)
            warnings.warn(
                f"the checkpoint holds state for {kind} {name}, which this run does not use; ignored", stacklevel=3
            )


def _plain(value: Any) -> Any:
    """`value` as checkpoint data: plain numbers, strings, tuples and lists kept, functions and classes by
    their qualified name (a repr holds a memory address that differs in the resuming process), anything
    else as its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _surgeries(algorithms: list[Any]) -> list[dict[str, Any]]:
    """The methods that changed the model's structure, with their arguments (``required_on_load``)."""
    return [
        {
            "method": algorithm.name,
            "hparams": {k: _plain(v) for k, v in algorithm.structure_hparams().items()},
            "module": type(algorithm).__module__.split(".")[0],  # where a loading run imports it from
        }
        for algorithm in map(as_algorithm, algorithms)
        if algorithm.required_on_load()
    ]


def _call(surgery: dict[str, Any]) -> str:
    args = ", ".join(f"{name}={value!r}" for name, value in surgery["hparams"].items())
    return f"{surgery['method']}({args})"


def _check_surgeries(state: State, payload: dict[str, Any], path: str | Path) -> None:
    """The surgeries recorded in the checkpoint are those this run applies (same methods, same arguments)."""
    recorded = payload.get("surgeries", [])
    ours = {entry["method"]: entry for entry in _surgeries(state.algorithms)}
    missing = [entry for entry in recorded if entry["method"] not in ours]
    if missing:
        calls = ", ".join(_call(entry) for entry in missing)
        modules = ", ".join(dict.fromkeys(entry["module"] for entry in missing if "module" in entry))
        raise CheckpointMismatchError(
            path,
            f"it was written after {calls} changed the model's structure, and this run does not apply "
            f"{'it' if len(missing) == 1 else 'them'}; add {calls} to algorithms= so that the same surgery runs "
            f"before the weights load{f' (from {modules})' if modules else ''}",
        )
    for entry in recorded:
        mine = ours.pop(entry["method"])
        if mine["hparams"] != entry["hparams"]:
            raise CheckpointMismatchError(
                path,
                f"it was written after {_call(entry)}, and this run applies {_call(mine)}: pass the arguments "
                "the checkpoint was written with, so that the model has the same structure",
            )
    if ours and "surgeries" in payload:  # checkpoints of older versions record no surgery
        names = ", ".join(_call(entry) for entry in ours.values())
        raise CheckpointMismatchError(
            path,
            f"this run applies {names}, but the checkpoint was written without it: load it into a run without "
            "that method, or start from an earlier checkpoint that had it",
        )


def run_payload(
    state: State,
    rng_by_rank: list[dict[str, Any]],
    scheduler_states: list[Any],
    trainer: dict[str, Any],
    sharded: bool = False,
) -> dict[str, Any]:
    """Everything needed to continue `state` exactly where it is (`trainer`: the loop's own counters);
    `sharded`: without model and optimizers, which a sharded checkpoint holds in its DCP files."""
    payload = {
        "format": FORMAT_VERSION,
        "run_name": state.run_name,
        "rank_zero_seed": state.rank_zero_seed,
        "timestamp": state.timestamp.state_dict(),
        "model": state.model.state_dict(),
        "optimizers": [opt.state_dict() for opt in state.optimizers],
        "optimizer_types": [type(opt).__qualname__ for opt in state.optimizers],
        "schedulers": scheduler_states,
        "scaler": state.scaler.state_dict() if state.scaler is not None else None,
        "algorithms": _algorithm_states(state.algorithms),
        "callbacks": _named_states(state.callbacks),
        "train_metrics": _metric_states(state.built_metrics(is_train=True)),
        "surgeries": _surgeries(state.algorithms),
        "trainer": trainer,
        "rng": rng_by_rank,
    }
    if sharded:
        del payload["model"], payload["optimizers"]
        payload["sharded"] = True
    return payload


def save_run(
    state: State, folder: Path, names: CheckpointNames, trainer: dict[str, Any], keep: int = -1
) -> Path | None:
    """Checkpoint the run (every rank must call); the path on rank 0, None on the others.

    One file written by rank 0, or a sharded folder written by every rank when the model is sharded.
    """
    rng = dist.all_gather_object(capture_rng())
    filename = names.name_for(state.timestamp, state)
    if is_sharded(state.model):
        payload = run_payload(state, rng, [s.state_dict() for s in state.schedulers], trainer, sharded=True)
        path: Path | None = sharded.save_sharded(state.model, state.optimizers, payload, folder, filename)
    elif state.rank == 0:
        payload = run_payload(state, rng, [s.state_dict() for s in state.schedulers], trainer)
        path = ckpt.save_checkpoint(payload, folder, filename)
    else:
        return None
    if state.rank != 0:
        return None
    ckpt.keep_newest(folder, keep, names)
    return path


def restore_run(
    state: State, payload: dict[str, Any], schedulers: list[Any], path: str | Path, strict_weights: bool = True
) -> dict[str, Any]:
    """Load `payload` (read from `path`) into `state`, strictly (the model's keys too, unless not `strict_weights`).

    Returns ``{"rng": this rank's RNG states or None, "trainer": the loop's counters}``; the
    caller restores the RNG last.
    """
    if payload.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            path, f"format {payload.get('format')!r} is not {FORMAT_VERSION}: an incompatible cadence version wrote it"
        )
    if payload.get("sharded"):
        payload = sharded.resolve_tensors(payload, Path(path), state.model)
    restore_weights(state, payload, path, strict=strict_weights)
    _restore_optimizers(state, payload, path)
    if len(payload["schedulers"]) != len(schedulers):
        raise CheckpointMismatchError(
            path,
            f"it has {len(payload['schedulers'])} scheduler(s) and this run {len(schedulers)}; "
            "pass the same schedulers as the run that wrote it",
        )
    for scheduler, saved in zip(schedulers, payload["schedulers"]):
        scheduler.load_state_dict(saved)
    if state.scaler is not None and payload["scaler"] is not None:
        state.scaler.load_state_dict(payload["scaler"])
    state.timestamp = Timestamp.from_state_dict(payload["timestamp"])
    state.rank_zero_seed = payload["rank_zero_seed"]
    state.run_name = payload["run_name"]
    _restore_named_states(state.algorithms, payload["algorithms"], "method", view=as_algorithm)
    _restore_named_states(state.callbacks, payload["callbacks"], "callback")
    if payload["train_metrics"]:  # none saved: they were never built, so fresh ones are the same
        _restore_metric_states(state.train_metrics, payload["train_metrics"])
    rng = payload["rng"]
    return {"rng": rng[state.rank] if state.rank < len(rng) else None, "trainer": payload.get("trainer", {})}


def restore_weights(state: State, payload: dict[str, Any], path: str | Path, strict: bool = True) -> None:
    """Load only the model's weights from `payload` (Composer's ``load_weights_only``), after checking
    that this run applies the surgeries the checkpoint was written after.

    With ``strict=False`` (``load_strict_model_weights=False``) missing and unexpected keys are
    allowed and named in a warning; a tensor of the wrong shape is always an error.
    """
    _check_surgeries(state, payload, path)
    try:
        if payload.get("sharded"):
            sharded.load_model(state.model, Path(path), strict=strict)
            return
        if is_sharded(state.model):  # a single-file checkpoint resumed under FSDP
            sharded.load_whole_model(state.model, payload["model"], strict=strict)
            return
        result = state.model.load_state_dict(payload["model"], strict=strict)
    except (RuntimeError, ValueError, KeyError) as error:  # size mismatch, missing or unexpected keys
        raise CheckpointMismatchError(
            path,
            f"its model weights do not fit this model ({type(state.model).__name__}): {error}. Build the same "
            "model (and list the same surgery methods) as the run that wrote it",
        ) from None
    if not strict and (result.missing_keys or result.unexpected_keys):
        warnings.warn(
            f"loaded the weights of {path} non-strictly: missing {result.missing_keys or 'none'}, "
            f"unexpected {result.unexpected_keys or 'none'}",
            stacklevel=3,
        )


def _missing_methods_hint(state: State, payload: dict[str, Any]) -> str:
    """Methods the writing run used and this one does not (one may have changed the parameter groups)."""
    ours = {type(algorithm).__qualname__ for algorithm in state.algorithms}
    missing = sorted({name for name, _ in payload.get("algorithms", []) if name not in ours})
    return f", with the same methods: add {', '.join(missing)} to algorithms=" if missing else ""


def _restore_optimizers(state: State, payload: dict[str, Any], path: str | Path) -> None:
    if payload.get("sharded"):
        _restore_sharded_optimizers(state, payload, Path(path))
        return
    saved_states = payload["optimizers"]
    if len(saved_states) != len(state.optimizers):
        raise CheckpointMismatchError(
            path,
            f"it has {len(saved_states)} optimizer(s) and this run {len(state.optimizers)}; "
            "pass the same optimizers as the run that wrote it",
        )
    saved_types = payload.get("optimizer_types", [None] * len(saved_states))
    for index, (optimizer, saved, saved_type) in enumerate(zip(state.optimizers, saved_states, saved_types)):
        ours = type(optimizer).__qualname__
        base = getattr(optimizer, "base_optimizer", None)  # a wrapper (SAM) starts from its base's state
        if saved_type is not None and saved_type not in (ours, type(base).__qualname__ if base else None):
            raise CheckpointMismatchError(
                path,
                f"optimizer {index} of the checkpoint is {saved_type} and this run's is {ours}; pass a {saved_type} "
                "as the run that wrote it did (its state, such as momentum, means nothing to another optimizer)",
            )
        try:
            if is_sharded(state.model):
                sharded.load_whole_optimizers(state.model, [optimizer], [saved])
            else:
                optimizer.load_state_dict(saved)
        except (KeyError, ValueError, RuntimeError) as error:
            raise CheckpointMismatchError(
                path,
                f"the state of optimizer {index} ({saved_type or 'unknown type'}) does not fit this run's {ours} "
                f"({type(error).__name__}: {error}); build it over the same parameters as the run that wrote it"
                + _missing_methods_hint(state, payload),
            ) from None


def _restore_sharded_optimizers(state: State, payload: dict[str, Any], path: Path) -> None:
    """The optimizers' state from a sharded checkpoint (keyed by parameter name), after the type checks."""
    saved_types = payload.get("optimizer_types", [])
    ours = [type(optimizer).__qualname__ for optimizer in state.optimizers]
    if len(saved_types) != len(ours):
        raise CheckpointMismatchError(
            path, f"it has {len(saved_types)} optimizer(s) and this run {len(ours)}; pass the same optimizers"
        )
    for index, (optimizer, saved_type) in enumerate(zip(state.optimizers, saved_types)):
        base = getattr(optimizer, "base_optimizer", None)
        if saved_type not in (ours[index], type(base).__qualname__ if base else None):
            raise CheckpointMismatchError(
                path,
                f"optimizer {index} of the checkpoint is {saved_type} and this run's is {ours[index]}; pass a "
                f"{saved_type} as the run that wrote it did",
            )
    try:
        sharded.load_optimizers(state.model, state.optimizers, path)
    except (RuntimeError, ValueError, KeyError) as error:
        raise CheckpointMismatchError(
            path,
            f"the optimizers' state does not fit this run ({type(error).__name__}: {str(error)[:300]}); build "
            "them over the same parameters as the run that wrote it" + _missing_methods_hint(state, payload),
        ) from None
