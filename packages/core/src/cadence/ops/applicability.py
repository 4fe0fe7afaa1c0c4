"""Checks a method's `check_applicable` is written with: what it reads from a batch, and in which form.

Each names the method, the batch key and what the batch really holds, and says the fix::

    def check_applicable(self, model, batch):
        require_tensor(self, batch, self.input_key, "images", key_name="input_key", ndim=4)

raises, on a HuggingFace text batch, ``NotApplicableError: CutOut reads the images at input_key=0,
but the batches are dicts with keys input_ids (Tensor 8x64 int64), labels (Tensor 8 int64); pass
input_key='<key>' naming them, or leave CutOut out: it needs a tensor (N, C, H, W)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cadence.algorithm import Algorithm, NotApplicableError
from cadence.batch import BatchKey, batch_get_item

__all__ = ["describe_batch", "read_batch_item", "require_tensor"]


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = "x".join(map(str, value.shape)) or "scalar"
        return f"Tensor {shape} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__


def describe_batch(batch: Any) -> str:
    """What a batch holds, in a few words: its container, keys or positions, and each tensor's shape and dtype."""
    if isinstance(batch, Mapping):
        items = ", ".join(f"{key} ({_describe_value(value)})" for key, value in batch.items())
        return f"dicts with keys {items}"
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        items = ", ".join(f"[{index}] {_describe_value(value)}" for index, value in enumerate(batch))
        return f"{type(batch).__name__}s of {len(batch)}: {items}"
    return f"{_describe_value(batch)} objects"


def _method_name(method: Algorithm | str) -> str:
    return method if isinstance(method, str) else method.name


def read_batch_item(method: Algorithm | str, batch: Any, key: BatchKey, role: str, key_name: str) -> Any:
    """``batch[key]``, or `NotApplicableError` saying the key does not fit these batches."""
    try:
        return batch_get_item(batch, key)
    except Exception:  # KeyError, IndexError, or whatever a user's getter raises
        hint = "'<key>'" if isinstance(batch, Mapping) else "<position>"
        raise NotApplicableError(
            f"{_method_name(method)} reads the {role} at {key_name}={key!r}, but the batches are "
            f"{describe_batch(batch)}; pass {key_name}={hint} naming them, or leave {_method_name(method)} out"
        ) from None


def require_tensor(
    method: Algorithm | str,
    batch: Any,
    key: BatchKey,
    role: str,
    *,
    key_name: str,
    ndim: int | tuple[int, ...] | None = None,
    floating: bool = False,
    channels: tuple[int, ...] | None = None,
    dtypes: tuple[torch.dtype, ...] | None = None,
) -> torch.Tensor:
    """The tensor at ``batch[key]``, checked against what the method needs (else `NotApplicableError`).

    Args:
        role: what the method calls it ("images", "targets", ...).
        ndim: the accepted numbers of dimensions, e.g. 4 for (N, C, H, W).
        floating: it must be a floating-point tensor (e.g. inputs that are blended).
        channels: the accepted sizes of dimension 1 (e.g. (1, 3) for grey or RGB images).
        dtypes: the accepted dtypes.
    """
    value = read_batch_item(method, batch, key, role, key_name)
    name = _method_name(method)
    needs = []
    if ndim is not None:
        ndims = (ndim,) if isinstance(ndim, int) else ndim
        needs.append(f"{' or '.join(map(str, ndims))} dimensions")
    if floating:
        needs.append("a floating-point dtype")
    if channels is not None:
        needs.append(f"{' or '.join(map(str, channels))} channels in dimension 1")
    if dtypes is not None:
        needs.append(f"dtype {' or '.join(str(d).removeprefix('torch.') for d in dtypes)}")
    fits = isinstance(value, torch.Tensor) and (
        (ndim is None or value.ndim in ((ndim,) if isinstance(ndim, int) else ndim))
        and (not floating or value.is_floating_point())
        and (channels is None or (value.ndim > 1 and value.shape[1] in channels))
        and (dtypes is None or value.dtype in dtypes)
    )
    if not fits:
        wanted = f"a tensor with {', '.join(needs)}" if needs else "a tensor"
        raise NotApplicableError(
            f"{name} needs the {role} at {key_name}={key!r} to be {wanted}, but they are a "
            f"{_describe_value(value)} (the batches are {describe_batch(batch)}); {name} does not apply to "
            f"this data: leave it out, or pass {key_name}= naming the right entry"
        )
    return value
