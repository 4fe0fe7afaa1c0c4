"""Text batches that keep the device busy: tokenised once per process, batched by length, few shapes.

* **Tokenised once.** `encoded_texts` and `language_blocks` keep their tensors (on the CPU) in a small
  in-process cache keyed by the tokenizer's content, the texts and the length, and `resident.on_device`
  keeps their copy on the device: the runs of an in-process grid tokenise and copy a dataset once. A
  tokenizer trained anew for each run hits the cache only when it comes out the same (BPE does; the
  WordPiece trainer breaks ties differently from run to run, and different ids must miss).
* **Batched by length.** `LengthBucketLoader` shuffles per epoch, cuts the order into pools of
  `pool_batches` batches, sorts each pool by length (ties keep their shuffled order) and shuffles the
  pool's batches among all the others, so that each batch holds samples of similar lengths (HF
  transformers' ``group_by_length`` does the same). Each batch is padded to the next multiple of
  `multiple` tokens (at most the data's width): few distinct shapes, so a GPU attention kernel that plans
  per shape (cuDNN) plans a few times rather than at nearly every batch. Evaluation sorts the whole set by
  length. Lengths come from a host copy, so no batch waits for the device, and the order of an epoch is a
  pure function of ``(seed, epoch)`` as in `TensorLoader`.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from cadence_harness.running import resident
from cadence_harness.running.loaders import TensorLoader
from cadence_harness.running.models import pack_blocks, tokenize

__all__ = [
    "LengthBucketLoader",
    "clear_token_cache",
    "encoded_texts",
    "language_blocks",
    "language_loader",
    "text_loader",
]

CACHE_ENTRIES = 6  # a grid's train and eval splits of a few recipes; SST-2's whole train split is ~70 MB
GRID_MULTIPLE = 16
POOL_BATCHES = 50
_cache: OrderedDict[tuple[str, ...], dict[str, torch.Tensor]] = OrderedDict()


def clear_token_cache() -> None:
    """Forget every tokenised dataset of this process."""
    _cache.clear()


def _tokenizer_key(tokenizer: Any) -> str | None:
    """What decides a tokenizer's output: its serialised pipeline (vocabulary included) and the settings of
    its calls; None for a tokenizer that cannot say (a slow one), which is then never cached."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    pipeline = json.loads(backend.to_str())
    for set_by_each_call in ("truncation", "padding"):  # from the call's arguments, which the key holds
        pipeline.pop(set_by_each_call, None)
    settings = (type(tokenizer).__name__, tokenizer.padding_side, tokenizer.truncation_side, tokenizer.pad_token_id)
    return hashlib.sha256(f"{settings}{json.dumps(pipeline, sort_keys=True)}".encode()).hexdigest()


def _texts_key(texts: Sequence[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()


def _cached(
    kind: str, tokenizer: Any, texts: Sequence[str], length: int, build: Callable[[], dict[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    tokenizer_key = _tokenizer_key(tokenizer)
    if tokenizer_key is None:
        return build()
    key = (kind, tokenizer_key, _texts_key(texts), str(length))
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    _cache[key] = built = build()
    while len(_cache) > CACHE_ENTRIES:
        _cache.popitem(last=False)
    return built


def encoded_texts(tokenizer: Any, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
    """`tokenize` (padded to the longest text, at most `max_length`), once per process for the same inputs.
    The tensors are shared: copy before changing them in place."""
    return _cached("classify", tokenizer, texts, max_length, lambda: tokenize(tokenizer, texts, max_length))


def language_blocks(tokenizer: Any, texts: Sequence[str], block_size: int) -> dict[str, torch.Tensor]:
    """`pack_blocks`, once per process for the same inputs (shared tensors, as `encoded_texts`)."""
    return _cached("blocks", tokenizer, texts, block_size, lambda: pack_blocks(tokenizer, texts, block_size))


class LengthBucketLoader(TensorLoader):
    """Text batches of similar lengths, padded to a multiple of `multiple` tokens (see the module docstring).

    Args:
        tensors: token tensors (N, L) and per-sample tensors (labels), on the training device.
        keys: the batch dict's keys, one per tensor.
        lengths: tokens per sample, on the CPU.
        multiple: batch widths are multiples of this (capped at L).
        pool_batches: batches per pool of samples sorted by length (larger: less padding, less mixing).
        batch_size, shuffle, drop_last, seed, rank, world_size: as `TensorLoader`.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        *,
        keys: tuple[str, ...],
        lengths: torch.Tensor,
        batch_size: int,
        shuffle: bool,
        drop_last: bool = False,
        seed: int = 0,
        multiple: int = GRID_MULTIPLE,
        pool_batches: int = POOL_BATCHES,
        rank: int = 0,
        world_size: int = 1,
    ):
        for name, value in (("multiple", multiple), ("pool_batches", pool_batches)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if lengths.device.type != "cpu" or lengths.shape != (tensors[0].shape[0],):
            raise ValueError(
                f"lengths must be a CPU tensor of one count per sample, shape ({tensors[0].shape[0]},); got "
                f"shape {tuple(lengths.shape)} on {lengths.device}"
            )
        super().__init__(
            tensors, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed, keys=keys, lengths=lengths,
            rank=rank, world_size=world_size,
        )  # fmt: skip
        self.multiple, self.pool_batches = multiple, pool_batches
        self.width = max(t.shape[1] for t in tensors if t.ndim == 2)

    def widths(self) -> list[int]:
        """Every batch width this loader can yield (its shapes, besides a short last batch)."""
        return sorted({min(w, self.width) for w in range(self.multiple, self.width + self.multiple, self.multiple)})

    def _order(self) -> torch.Tensor:
        lengths = self.lengths
        assert lengths is not None
        if not self.shuffle:  # evaluation: shortest first, every sample once
            return torch.sort(lengths, stable=True).indices
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=generator)[: len(self) * self.batch_size]
        pool = self.pool_batches * self.batch_size
        key = torch.arange(len(order)) // pool * (int(lengths.max()) + 1) + lengths[order]
        order = order[torch.sort(key, stable=True).indices]
        full = len(order) // self.batch_size
        batches = order[: full * self.batch_size].view(full, self.batch_size)
        shuffled = batches[torch.randperm(full, generator=generator)].reshape(-1)
        return torch.cat([shuffled, order[full * self.batch_size :]])  # a short last batch stays last

    def _batch(self, index: torch.Tensor, device_index: torch.Tensor, rows: tuple[int, int] | None) -> Any:
        assert self.lengths is not None and self.keys is not None
        longest = int(self.lengths[index].max())
        width = min(-(-longest // self.multiple) * self.multiple, self.width)
        items = [(t[:, :width] if t.ndim == 2 else t).index_select(0, device_index) for t in self.tensors]
        return dict(zip(self.keys, items))


def text_loader(
    tokenizer: Any,
    texts: Sequence[str],
    labels: torch.Tensor,
    *,
    max_length: int,
    device: torch.device,
    seed: int,
    batch_size: int,
    train: bool,
    rank: int = 0,
    world_size: int = 1,
) -> LengthBucketLoader:
    """Classification batches ``{input_ids, attention_mask[, token_type_ids], labels}`` batched by length."""
    encoded = encoded_texts(tokenizer, texts, max_length)
    return LengthBucketLoader(
        resident.on_device((*encoded.values(), labels), device),  # copied once per process
        keys=(*encoded, "labels"),
        lengths=encoded["attention_mask"].sum(1),
        batch_size=batch_size,
        shuffle=train,
        drop_last=train,
        seed=seed,
        rank=rank,
        world_size=world_size,
    )


def language_loader(
    tokenizer: Any,
    texts: Sequence[str],
    *,
    block_size: int,
    device: torch.device,
    seed: int,
    batch_size: int,
    train: bool,
    rank: int = 0,
    world_size: int = 1,
) -> TensorLoader:
    """Language-modelling batches of full blocks (one shape, no padding: nothing to bucket)."""
    blocks = language_blocks(tokenizer, texts, block_size)
    return TensorLoader(
        resident.on_device(tuple(blocks.values()), device),
        batch_size=batch_size,
        shuffle=train,
        drop_last=train,
        seed=seed,
        keys=tuple(blocks),
        rank=rank,
        world_size=world_size,
    )
