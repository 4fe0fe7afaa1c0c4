"""DCP's ``.metadata`` read without running code: torch's own reader unpickles it with no restriction.

`read_dcp_metadata` unpickles with an allow-list (the pickle documentation's "restricting globals"):
DCP's metadata dataclasses and enums, torch's dtypes and sizes, paths. Anything else raises
``pickle.UnpicklingError`` naming the global, before it is looked up.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch

__all__ = ["read_dcp_metadata"]


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only DCP's metadata classes, torch's dtypes and sizes (the pickle docs' "restricting globals")."""

    _ALLOWED = {
        "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
        "torch.serialization": {"_get_layout"},
        "pathlib": {"PosixPath", "WindowsPath", "Path"},
        "collections": {"OrderedDict"},
    }

    def find_class(self, module: str, name: str) -> Any:
        if name in self._ALLOWED.get(module, ()) or _is_metadata_class(module, name):
            return super().find_class(module, name)
        plain = isinstance(getattr(torch, name, None), (torch.dtype, torch.memory_format))
        if module == "torch" and (name == "Size" or plain):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"the checkpoint's metadata names {module}.{name}, which DCP metadata never holds")


def _is_metadata_class(module: str, name: str) -> bool:
    """A class DCP's metadata module defines (its dataclasses and enums), nothing it imports."""
    from torch.distributed.checkpoint import metadata

    found = getattr(metadata, name, None) if module == metadata.__name__ else None
    return isinstance(found, type) and found.__module__ == module


def read_dcp_metadata(path: Path) -> Any:
    """The ``Metadata`` of the DCP file `path` (a checkpoint folder's ``.metadata``), unpickled safely."""
    return _MetadataUnpickler(io.BytesIO(Path(path).read_bytes())).load()
