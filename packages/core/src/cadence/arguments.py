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
from cadence.ops.checks import check_int
from cadence.time import Time, TimeLike, TimeUnit, parse_time

__all__ = [
    "as_list",
    "check_checkpointing",
    "check_max_duration",
    "check_microbatch_size",
    "check_model",
    "parse_device",
]

_DURATION_UNITS = (TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN)


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
    return parse_time("max_duration", max_duration, units=_DURATION_UNITS, positive=True), float(ratio)


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
