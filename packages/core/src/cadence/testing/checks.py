"""Checks for tests: bitwise equality of nested state, and the aten ops a block of code runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["HOST_SYNC_OPS", "assert_same_tensors", "recording_ops"]


def assert_same_tensors(a: Any, b: Any, path: str = "state") -> None:
    """Bitwise equality of nested containers of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
            raise AssertionError(f"{path} differs: {a!r} != {b!r}")
    elif isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            raise AssertionError(f"{path} keys differ: {sorted(map(str, a))} != {sorted(map(str, b or {}))}")
        for key in a:
            assert_same_tensors(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            raise AssertionError(f"{path} lengths differ: {a!r} != {b!r}")
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{path}[{index}]")
    elif a != b:
        raise AssertionError(f"{path} differs: {a!r} != {b!r}")


#: aten ops (and one pattern) that make a device wait for the host: reading a value back, a size that
#: depends on the data, or a tensor made from host data. A CPU run cannot show a synchronisation, so
#: tests check that a batched path never runs these instead.
HOST_SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "nonzero",
        "masked_select",
        "bincount",
        "unique",
        "equal",
        "is_nonzero",
        "lift_fresh",
        "index_select",
        "sort",
        "argsort",
        "boolean mask indexing",
    }
)


@contextlib.contextmanager
def recording_ops() -> Iterator[set[str]]:
    """Collect the names of the aten ops run inside the block (plus "boolean mask indexing")."""
    from torch.utils._python_dispatch import TorchDispatchMode  # torch's documented hook for observing ops

    names: set[str] = set()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = func.overloadpacket.__name__
            names.add(name)
            if name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]):
                names.add("boolean mask indexing")
            return func(*args, **(kwargs or {}))

    with Recorder():
        yield names
