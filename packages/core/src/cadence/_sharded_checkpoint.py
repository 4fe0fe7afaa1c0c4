"""Sharded checkpoints: a folder written by every rank through torch's Distributed Checkpoint (DCP).

A run sharded with FSDP (`cadence._sharding`) saves a folder named as a checkpoint file would be
(``ep1-ba4.pt/``): DCP's ``.metadata`` and one ``__<rank>_0.distcp`` per writing rank hold the model
and the optimizers (``get_state_dict``: parameter names, global shapes), plus sharded tensors the
methods hold (EMA's average, SWA's); ``cadence.pt`` holds the rest of the run (`cadence._snapshot`),
written by rank 0. DCP reshards on load, so a checkpoint written by N processes loads into M, or
into one process without any process group (inference, or a run without FSDP).

The guarantees of single-file checkpoints hold: the folder is written under a temporary name and
renamed when every rank has finished (a killed run leaves the previous checkpoint, and the
temporary folder is removed on the next start); and loading never runs code from the files:
DCP's ``.metadata`` is unpickled with an allow-list of DCP's own metadata classes, and the
non-tensor entries with ``torch.load(weights_only=True)`` (torch's own reader uses a plain pickle
for both).
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cadence import distributed as dist
from cadence._dcp_metadata import read_dcp_metadata
from cadence.checkpoint import SHARDED_PAYLOAD as PAYLOAD
from cadence.checkpoint import CheckpointError, point_latest_at

__all__ = ["PAYLOAD", "is_sharded_checkpoint", "load_model", "load_optimizers", "resolve_tensors", "save_sharded"]

_MARK = "__dcp_tensor__"


def is_sharded_checkpoint(path: str | Path) -> bool:
    return Path(path).is_dir()


# Saving -----------------------------------------------------------------------------------------
def _take_dtensors(value: Any, key: str, taken: dict[str, Any]) -> Any:
    """`value` with every DTensor replaced by a placeholder naming where it went in `taken`."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        taken[key] = value
        return {_MARK: key, "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, dict):
        return {k: _take_dtensors(v, f"{key}/{k}", taken) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_take_dtensors(v, f"{key}/{i}", taken) for i, v in enumerate(value))
    return value


def save_sharded(
    model: nn.Module, optimizers: list[torch.optim.Optimizer], payload: dict[str, Any], folder: Path, filename: str
) -> Path:
    """Write ``folder/filename/`` from every rank (all must call); rank 0 renames it into place and points
    ``latest.pt`` at it. `payload`: the run without model and optimizers (rank 0's is written)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    folder.mkdir(parents=True, exist_ok=True)
    extras: dict[str, Any] = {}
    payload = {**payload, "algorithms": _take_dtensors(payload["algorithms"], "algorithms", extras)}
    payload["callbacks"] = _take_dtensors(payload["callbacks"], "callbacks", extras)
    tensors: dict[str, Any] = {"model": get_model_state_dict(model), "extras": extras}
    if optimizers:
        tensors["optimizers"] = get_optimizer_state_dict(model, optimizers)
    made = tempfile.mkdtemp(dir=folder, prefix=f".{filename}.", suffix=".tmp") if dist.get_rank() == 0 else None
    temporary = Path(dist.broadcast_object(made))
    dcp.save(tensors, checkpoint_id=temporary)
    target = folder / filename
    if dist.get_rank() == 0:
        with (temporary / PAYLOAD).open("wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():  # save_overwrite: the old one goes aside, the new one in, the old one away
            aside = Path(tempfile.mkdtemp(dir=folder, prefix=f".{filename}.", suffix=".tmp"))
            os.replace(target, aside / "old")
            os.replace(temporary, target)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(temporary, target)
        point_latest_at(folder, filename)
    dist.barrier()
    return target


# Loading ----------------------------------------------------------------------------------------
def _reader(path: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata = read_dcp_metadata(path / ".metadata")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(path)


def _planner(partial: bool) -> Any:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            loaded = torch.load(value, weights_only=True)  # torch's planner unpickles without restriction
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return SafePlanner(allow_partial_load=partial)


def _load(path: Path, tensors: dict[str, Any], partial: bool = False) -> None:
    import torch.distributed.checkpoint as dcp

    try:
        read_dcp_metadata(path / ".metadata")  # refused here, before DCP reads it (and wraps the error)
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as error:
        raise CheckpointError(path, f"refusing to load it: {error}") from None
    dcp.load(tensors, storage_reader=_reader(path), planner=_planner(partial))


def load_model(model: nn.Module, path: Path, strict: bool = True) -> None:
    """Load the model's weights of the sharded checkpoint `path` into `model` (sharded or not)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    weights = {"model": get_model_state_dict(model)}
    _load(path, weights, partial=not strict)
    set_model_state_dict(model, weights["model"], options=StateDictOptions(strict=strict))


def load_optimizers(model: nn.Module, optimizers: list[torch.optim.Optimizer], path: Path) -> None:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    if optimizers:
        state = {"optimizers": get_optimizer_state_dict(model, optimizers)}
        _load(path, state)
        set_optimizer_state_dict(model, optimizers, state["optimizers"])


def load_whole_model(model: nn.Module, weights: dict[str, Any], strict: bool = True) -> None:
    """Whole tensors (a single-file checkpoint's model) into a sharded `model`: each rank keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=strict))


def load_whole_optimizers(model: nn.Module, optimizers: list[torch.optim.Optimizer], saved: list[Any]) -> None:
    """Single-file optimizer states (keyed by parameter position) into optimizers over sharded parameters:
    re-keyed by parameter name, then split into the shards by torch's ``set_optimizer_state_dict``."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = {id(p): name for name, p in model.named_parameters()}
    state: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    for optimizer, whole in zip(optimizers, saved):
        for ours, theirs in zip(optimizer.param_groups, whole["param_groups"]):
            if len(ours["params"]) != len(theirs["params"]):
                raise ValueError(
                    f"a parameter group of {len(theirs['params'])} parameters meets one of {len(ours['params'])}"
                )
            fqns = [names[id(p)] for p in ours["params"]]
            state.update({fqn: whole["state"][i] for fqn, i in zip(fqns, theirs["params"]) if i in whole["state"]})
            groups.append({**theirs, "params": fqns})
    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizers, {"state": state, "param_groups": groups}, options=options)


def _template(placeholder: dict[str, Any], like: Any) -> torch.Tensor:
    """An empty tensor to load a saved DTensor into: sharded as the model's parameters are, or whole."""
    dtype = getattr(torch, placeholder["dtype"])
    if like is None:
        return torch.empty(placeholder["shape"], dtype=dtype)
    from torch.distributed.tensor import empty

    return empty(placeholder["shape"], dtype=dtype, device_mesh=like.device_mesh, placements=like.placements)


def _fill(value: Any, loaded: dict[str, Any]) -> Any:
    if isinstance(value, dict) and _MARK in value:
        return loaded[value[_MARK]]
    if isinstance(value, dict):
        return {k: _fill(v, loaded) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, loaded) for v in value)
    return value


def _placeholders(value: Any, found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if isinstance(value, dict) and _MARK in value:
        found[value[_MARK]] = value
    elif isinstance(value, dict):
        for item in value.values():
            _placeholders(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _placeholders(item, found)
    return found


def resolve_tensors(payload: dict[str, Any], path: Path, model: nn.Module) -> dict[str, Any]:
    """`payload` with the methods' and callbacks' sharded tensors loaded from `path`: sharded like the
    model's parameters when `model` is sharded, whole tensors otherwise."""
    from torch.distributed.tensor import DTensor

    found = _placeholders([payload["algorithms"], payload["callbacks"]], {})
    if not found:
        return payload
    like = next((p for p in model.parameters() if isinstance(p, DTensor)), None)
    extras = {"extras": {key: _template(placeholder, like) for key, placeholder in found.items()}}
    _load(path, extras, partial=True)
    loaded = extras["extras"]
    return {**payload, **{part: _fill(payload[part], loaded) for part in ("algorithms", "callbacks")}}
