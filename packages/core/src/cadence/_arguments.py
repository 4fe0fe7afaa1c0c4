"""The `Trainer`'s arguments, checked before any work is done.

Each check names the argument, echoes the value and says what is allowed or the fix, so a bad
argument never costs a started run: booleans are not numbers, strings are not booleans,
infinities are not ratios, and a run that would train nothing is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from cadence import distributed as dist
from cadence.batch import batch_num_tokens
from cadence.ops.checks import MAX_SEED, check_bool, check_int
from cadence.time import Time, TimeLike, TimeUnit, parse_time

__all__ = [
    "DURATION_UNITS",
    "as_list",
    "check_checkpointing",
    "check_duration_is_countable",
    "check_flags",
    "check_max_duration",
    "check_microbatch_argument",
    "check_microbatch_size",
    "check_model",
    "check_seed_and_run_name",
    "parse_device",
    "refuse_unknown_arguments",
]

DURATION_UNITS = (TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN)


def check_model(model: Any) -> None:
    if not isinstance(model, nn.Module) or not callable(getattr(model, "loss", None)):
        raise TypeError(
            f"model must be a cadence.Model with forward(batch) and loss(outputs, batch), got "
            f"{type(model).__name__}; wrap a classification module in cadence.Classifier(module, num_classes)"
        )


def parse_device(device: str | torch.device | None) -> torch.device:
    """``"cpu"``, ``"gpu"``/``"cuda"`` (this rank's GPU under torchrun), a `torch.device`, or None (GPU if any)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device={device!r} must be 'cpu', 'gpu' or a torch.device")
    name = device.type if isinstance(device, torch.device) else device.lower()
    if name in ("gpu", "cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available; use device='cpu'")
        return dist.local_device(torch.device("cuda") if not isinstance(device, torch.device) else device)
    if name == "cpu":
        return torch.device("cpu")
    raise ValueError(f"unknown device={device!r}; use 'cpu' or 'gpu'")


def check_max_duration(max_duration: TimeLike | None, scale_schedule_ratio: Any) -> tuple[Time | None, float]:
    """(the run's length as given, the ratio as a float); the trainer scales the length once it knows an
    epoch's length (`cadence.ops.schedule_scaling.scale_duration`)."""
    ratio = scale_schedule_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (0 < ratio < float("inf")):
        raise ValueError(
            f"scale_schedule_ratio={ratio!r} must be a finite number > 0 (1.0 keeps the run as it is, 0.5 halves it)"
        )
    if max_duration is None:
        return None, float(ratio)
    return parse_time("max_duration", max_duration, units=DURATION_UNITS, positive=True), float(ratio)


def check_duration_is_countable(duration: Time | None, batch: Any) -> None:
    """A ``tok`` duration needs batches that hold tokens, or the run would never end."""
    if duration is not None and duration.unit is TimeUnit.TOKEN and batch_num_tokens(batch) == 0:
        raise ValueError(
            f"max_duration={duration} counts tokens, but the training batches hold none (tokens are counted in "
            "a dict batch's 'input_ids'); give max_duration in ep, ba or sp"
        )


def check_microbatch_size(size: Any, train_dataloader: Any) -> int | None:
    if size is None:
        return None
    size = check_int("device_train_microbatch_size", size, ge=1, hint="or None for one microbatch per batch")
    batch_size = getattr(train_dataloader, "batch_size", None)
    if batch_size is not None and size > batch_size:
        raise ValueError(
            f"device_train_microbatch_size={size} is larger than the batch size "
            f"{batch_size}; use at most {batch_size} (or leave it None for one microbatch per batch)"
        )
    return size


def check_flags(**flags: Any) -> None:
    """Each keyword is a bool (``autoresume="no"`` and ``progress_bar=0`` are refused, named)."""
    for name, flag in flags.items():
        check_bool(name, flag)


def check_seed_and_run_name(seed: Any, run_name: Any) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise ValueError(f"seed={seed!r} must be an int in [0, 2**63 - 1], or None for a random seed")
    if run_name is not None and not isinstance(run_name, str):
        raise TypeError(f"run_name={run_name!r} must be a string or None")


def as_list(value: Any, name: str, kind: type | tuple[type, ...]) -> list[Any]:
    """One object, or a list or tuple of them (as Composer accepts), each an instance of `kind`.

    A single object is never iterated: ``algorithms=MixUp()`` means ``[MixUp()]``, and a string
    is one (wrong) object, not a sequence of letters. A bad item is named by its position in the list.
    """
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for index, item in enumerate(items):
        if not isinstance(item, kinds):
            raise TypeError(f"{name}[{index}] is {_describe(item, kinds)}")
    return items


def _describe(item: Any, kinds: tuple[type, ...]) -> str:
    if isinstance(item, type) and issubclass(item, kinds):
        return f"the class {item.__name__}; pass an instance: {item.__name__}(...)"
    expected = " or ".join(k.__name__ for k in kinds)
    shown = repr(item) if len(repr(item)) <= 60 else repr(item)[:57] + "..."
    return f"a {type(item).__name__} ({shown}); expected a {expected}, or a list of them"


def check_checkpointing(
    save_folder: str | Path | None, keep: Any, autoresume: bool, load_path: str | Path | None
) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or not (keep == -1 or keep >= 1):
        raise ValueError(f"save_num_checkpoints_to_keep={keep!r} must be -1 (keep all) or an int >= 1")
    for name, path in (("save_folder", save_folder), ("load_path", load_path)):
        if path is not None and not isinstance(path, (str, Path)):
            raise TypeError(f"{name}={path!r} must be a path (str or pathlib.Path) or None")
    if autoresume and save_folder is None:
        raise ValueError("autoresume=True needs save_folder, where the checkpoints to resume from are written")


# Composer's Trainer arguments that cadence does not take, each with what to do instead.
_COMPOSER_ONLY = {
    "train_dataloader_label": "cadence's training loader is labelled 'train'; leave it out",
    "spin_dataloaders": "cadence resumes mid-epoch by skipping in the sampler, never by spinning the loader",
    "algorithm_passes": "methods declare their order (Algorithm.order) and the engine sorts by it",
    "step_schedulers_every_batch": "cadence schedulers step every batch, torch LRSchedulers every epoch",
    "log_to_console": "add cadence.ConsoleLogger() to loggers (progress_bar=True adds one)",
    "console_stream": "ConsoleLogger(stream=...) sets it",
    "console_log_interval": "ConsoleLogger prints every batch on its progress bar; leave it out",
    "log_traces": "Engine.run_event returns the traces; log them from a callback",
    "auto_log_hparams": "the trainer logs its hyperparameters at FIT_START always",
    "python_log_level": "configure Python's logging module directly",
    "load_object_store": "download the checkpoint and pass its local path as load_path",
    "load_progress_bar": "loading shows no progress bar",
    "load_ignore_keys": "load with load_weights_only=True and load_strict_model_weights=False",
    "load_exclude_algorithms": "list only the methods you want in algorithms=",
    "save_latest_filename": "cadence writes latest.pt in save_folder",
    "save_weights_only": "checkpoints hold the whole run (exact resume); load_weights_only=True reads the weights",
    "save_ignore_keys": "checkpoints hold the whole run (exact resume)",
    "save_metrics": "the eval metrics are logged, and the train metrics' states are saved",
    "dist_timeout": "set TORCH_NCCL_BLOCKING_WAIT / the process group's timeout through torchrun",
    "ddp_sync_strategy": "DDP all-reduces on the last microbatch of each batch",
    "precision_config": "FP8 is not supported; use precision='amp_bf16'",
    "accumulate_train_batch_on_tokens": "microbatch losses are weighted by samples",
    "profiler": "wrap trainer.fit() in torch.profiler.profile(...)",
}


_COMPOSER_FIT_ONLY = {
    name: "pass it to Trainer(...); fit() keeps it for the whole run"
    for name in ("precision", "device_train_microbatch_size", "scale_schedule_ratio")
}


def refuse_unknown_arguments(arguments: dict[str, Any], known: Any, where: str = "Trainer") -> None:
    """A `TypeError` naming every argument `where` (``Trainer`` or ``fit``) does not take: Composer's with
    what to do instead, others with the closest known name."""
    if not arguments:
        return
    import difflib

    advice = {**_COMPOSER_ONLY, **(_COMPOSER_FIT_ONLY if where == "fit" else {})}
    lines = []
    for name in arguments:
        if name in advice:
            lines.append(f"{name} (Composer's; not in cadence's {where}(): {advice[name]})")
        else:
            close = difflib.get_close_matches(name, list(known), n=1)
            lines.append(f"{name} (unknown{f'; did you mean {close[0]}?' if close else ''})")
    raise TypeError(f"{where}() got unexpected keyword argument(s): " + "; ".join(lines))


def check_microbatch_argument(size: Any, train_dataloader: Any, device: torch.device, world_size: int) -> int | None:
    """`check_microbatch_size`, plus ``"auto"``: on a single GPU, the search starts from the whole batch."""
    if size != "auto":
        return check_microbatch_size(size, train_dataloader)
    if device.type != "cuda":
        raise ValueError(
            f"device_train_microbatch_size='auto' searches for the largest microbatch that fits in GPU memory, and "
            f"this run is on {device.type}; give an int (gradient accumulation) or None (whole batches)"
        )
    if world_size > 1:
        raise ValueError(
            "device_train_microbatch_size='auto' runs on one GPU (the ranks would have to agree on every retry); "
            "give an int under torchrun"
        )
    return None
