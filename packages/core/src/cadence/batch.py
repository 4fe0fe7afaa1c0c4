"""Format-agnostic access to batches: tuples/lists ``(input, target)``, dicts, or custom objects.

A *key* is an int (tuple/list position), a str (dict key), or a ``(getter, setter)`` pair of
callables for any other batch type. Setting never mutates the user's batch in place:
it returns a new batch (tuples are rebuilt, dicts are shallow-copied).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

import torch

__all__ = [
    "BatchKey",
    "batch_get_item",
    "batch_num_samples",
    "batch_num_tokens",
    "batch_set_item",
    "batch_to_device",
    "check_batch_key",
    "split_batch",
    "take_samples",
]

GetterSetter = tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]
BatchKey = int | str | GetterSetter


def _is_getter_setter(key: Any) -> TypeGuard[GetterSetter]:
    return isinstance(key, tuple) and len(key) == 2 and all(callable(k) for k in key)


def check_batch_key(name: str, key: Any) -> BatchKey:
    """Validate a user's batch key up front (e.g. a method's ``input_key``); returns it unchanged."""
    if not (_is_getter_setter(key) or isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))):
        raise TypeError(
            f"`{name}`={key!r} must be an int (tuple batches), a str (dict batches) or a (getter, setter) "
            "pair of callables"
        )
    return key


def batch_get_item(batch: Any, key: BatchKey) -> Any:
    if _is_getter_setter(key):
        return key[0](batch)
    try:
        return batch[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise KeyError(
            f"cannot read key {key!r} from a batch of type {type(batch).__name__}: {exc}. "
            "Pass input_key/target_key matching your batch (an int for tuples, a str for dicts, "
            "or a (getter, setter) pair)."
        ) from None


def batch_set_item(batch: Any, key: BatchKey, value: Any) -> Any:
    """Return a copy of `batch` with `key` set to `value`."""
    if _is_getter_setter(key):
        return key[1](batch, value)
    if isinstance(batch, Mapping):
        if not isinstance(key, str):
            raise KeyError(f"dict batches take str keys, got {key!r}")
        new = dict(batch)
        new[key] = value
        return new
    if isinstance(batch, (tuple, list)):
        if not isinstance(key, int):
            raise KeyError(f"tuple/list batches take int keys, got {key!r}")
        items = list(batch)
        items[key] = value
        return type(batch)(items) if isinstance(batch, list) else tuple(items)
    raise TypeError(f"cannot set key {key!r} on a batch of type {type(batch).__name__}; pass a (getter, setter) pair")


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (tuple, list)):  # before Mapping, whose ABC check is the slow one
        values: Sequence[Any] = batch
    elif isinstance(batch, Mapping):
        values = list(batch.values())
    else:
        return None
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def batch_num_samples(batch: Any) -> int:
    """The number of samples: the leading dimension of the first tensor in the batch."""
    first = batch[0] if batch.__class__ is tuple and batch else None  # (inputs, targets): every batch, no search
    tensor = first if isinstance(first, torch.Tensor) else _first_tensor(batch)
    if tensor is None or tensor.ndim == 0:
        raise TypeError(
            f"cannot tell the number of samples in a batch of type {type(batch).__name__}; "
            "batches must contain at least one tensor with a batch dimension"
        )
    return int(tensor.shape[0])


def batch_num_tokens(batch: Any) -> int:
    """Tokens in a language-model batch (``input_ids.numel()``), else 0. Reads shapes only: no sync."""
    if batch.__class__ is tuple:  # the common case, before the Mapping ABC's slow check
        return 0
    if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].numel())
    return 0


def batch_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    if isinstance(batch, torch.Tensor):
        if batch.device == device:
            return batch
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, tuple):  # before Mapping: an ABC check costs more than the common case
        moved = []  # a loop, not a generator: tensors already on `device` (every step's case) cost no call
        for value in batch:
            on_device = value.__class__ is torch.Tensor and value.device == device
            moved.append(value if on_device else batch_to_device(value, device, non_blocking))
        return tuple(moved)
    if isinstance(batch, list):
        return [batch_to_device(v, device, non_blocking) for v in batch]
    if isinstance(batch, Mapping):
        return {k: batch_to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


def split_batch(batch: Any, microbatch_size: int) -> list[Any]:
    """Split every tensor with the batch's leading dimension into chunks of `microbatch_size`.

    Tensors whose leading dimension differs (and non-tensors) are shared by all microbatches.
    """
    num_samples = batch_num_samples(batch)
    if microbatch_size >= num_samples:
        return [batch]
    num_chunks = -(-num_samples // microbatch_size)
    return [_chunk(batch, num_samples, microbatch_size, i) for i in range(num_chunks)]


def _chunk(batch: Any, num_samples: int, size: int, index: int) -> Any:
    if isinstance(batch, torch.Tensor):
        if batch.ndim > 0 and batch.shape[0] == num_samples:
            return batch[index * size : (index + 1) * size]
        return batch
    if isinstance(batch, Mapping):
        return {k: _chunk(v, num_samples, size, index) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_chunk(v, num_samples, size, index) for v in batch)
    if isinstance(batch, list):
        return [_chunk(v, num_samples, size, index) for v in batch]
    return batch


def take_samples(batch: Any, indices: torch.Tensor, num_samples: int, keys: Sequence[BatchKey] = ()) -> Any:
    """The samples `indices` of a batch: every tensor whose first dimension is `num_samples` is indexed.

    Tuple, list and dict batches are rebuilt (never changed in place); for other batch types only
    the entries at `keys` (e.g. the input and the target) can be reached, through their getters.
    """

    def pick(value: Any) -> Any:
        per_sample = isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == num_samples
        return value[indices] if per_sample else value

    if isinstance(batch, Mapping):
        return {key: pick(value) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return [pick(v) for v in batch] if isinstance(batch, list) else tuple(pick(v) for v in batch)
    for key in keys:
        batch = batch_set_item(batch, key, pick(batch_get_item(batch, key)))
    return batch
