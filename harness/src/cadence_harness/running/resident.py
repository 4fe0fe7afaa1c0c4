"""Data that stays resident across the runs of one process (an in-process grid runs many runs in one).

The first run of a dataset loads it (decoding or reading the cache) and copies it to the device; the runs
after it reuse both, so a run's start-up is the model and its methods, not the data. The tensors are never
written in place (loaders index them; methods change copies), so sharing them cannot couple two runs. At
most `KEEP` datasets are kept, the least recently used dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from cadence_harness.running import data as datasets

__all__ = ["KEEP", "channel_stats", "clear", "load_dataset", "on_device"]

KEEP = 2
_datasets: OrderedDict[tuple[Any, ...], datasets.ImageData | datasets.TextData] = OrderedDict()
# (the source tensors, kept alive so that their ids stay theirs; their copies on the device)
_device_copies: OrderedDict[tuple[Any, ...], tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = OrderedDict()


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> Any:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > KEEP:
        cache.popitem(last=False)
    return value


def load_dataset(
    name: str, *, data_dir: str | Path | None, subset: int | None, eval_subset: int | None, download: bool
) -> datasets.ImageData | datasets.TextData:
    """`cadence_harness.running.data.load_dataset`, once per process for the same arguments."""
    key = (name, str(data_dir) if data_dir else None, subset, eval_subset, download)
    if key in _datasets:
        _datasets.move_to_end(key)
        return _datasets[key]
    dataset = datasets.load_dataset(name, data_dir=data_dir, subset=subset, eval_subset=eval_subset, download=download)
    return _remember(_datasets, key, dataset)


def on_device(tensors: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """`tensors` on `device`, copied once per process for the same tensors."""
    key = (*(id(t) for t in tensors), str(device))
    if key in _device_copies:
        _device_copies.move_to_end(key)
        return _device_copies[key][1]
    return _remember(_device_copies, key, (tensors, tuple(t.to(device) for t in tensors)))[1]


_stats: dict[int, tuple[datasets.ImageData, Any]] = {}


def channel_stats(dataset: datasets.ImageData) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`ImageData.channel_stats`, once per resident dataset (over 50,000 images it takes a noticeable moment)."""
    entry = _stats.get(id(dataset))
    if entry is None or entry[0] is not dataset:
        if len(_stats) >= KEEP:
            _stats.clear()
        entry = _stats[id(dataset)] = (dataset, dataset.channel_stats())
    return entry[1]


def clear() -> None:
    """Forget every resident dataset (tests; a grid that moves to other data frees the memory itself)."""
    _datasets.clear()
    _device_copies.clear()
    _stats.clear()
