"""Sequence Length Warmup as pure functions: the length schedule, and a dict batch cut to a length. Torch only."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from cadence.ops.checks import check_bool, check_int, check_number

__all__ = ["check_seq_length_warmup_args", "set_batch_sequence_length", "warmup_seq_length"]

#: what the tail of the last row holds in reshaping mode: masked out, and ignored by HF losses
PAD_VALUES = {"attention_mask": 0, "labels": -100}


def check_seq_length_warmup_args(
    duration: float, min_seq_length: int, max_seq_length: int, step_size: int, truncate: bool, preserve: bool
) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_number("duration", duration, ge=0, le=1, hint="the fraction of the run spent warming up (0: none)")
    check_int("min_seq_length", min_seq_length, ge=1, hint="the first batches' sequence length")
    check_int("max_seq_length", max_seq_length, ge=min_seq_length, hint=f"at least min_seq_length={min_seq_length}")
    check_int("step_size", step_size, ge=1, hint="tokens added per increase; a multiple of 8 suits tensor cores")
    check_bool("truncate", truncate, "False re-chunks the extra tokens into new rows instead")
    check_bool("preserve_end_of_sequence", preserve, "True keeps each sequence's last token when truncating")


def warmup_seq_length(
    elapsed: int, warmup: int, min_seq_length: int = 8, max_seq_length: int = 1024, step_size: int = 8
) -> int:
    """The sequence length after `elapsed` units of a warmup lasting `warmup` units (batches, or samples/tokens).

    Composer's schedule: the length starts at `min_seq_length` and grows by `step_size` every
    ``warmup // steps`` units, ``steps = ceil((max - min) / step_size)`` being the number of
    increases (the last one is clipped to `max_seq_length`). It is defined for every warmup:
    one shorter than ``steps`` units grows by several steps per unit (``elapsed * steps //
    warmup`` of them) and still reaches the maximum at `warmup`; no warmup (0) and
    ``min == max`` give `max_seq_length` throughout. A pure function of its arguments, so a
    resumed run gets the lengths the uninterrupted run got.
    """
    steps = math.ceil((max_seq_length - min_seq_length) / step_size)
    if warmup <= 0 or steps == 0:
        return max_seq_length
    every = warmup // steps
    increases = elapsed // every if every else elapsed * steps // warmup
    return min(max_seq_length, min_seq_length + step_size * increases)


def set_batch_sequence_length(
    batch: Mapping[str, Any], curr_seq_len: int, truncate: bool = True, preserve_end_of_sequence: bool = False
) -> dict[str, Any]:
    """Give every token sequence of a dict batch the length `curr_seq_len`; a new dict (the batch is not changed).

    Token sequences are the tensors whose first two dimensions are those of ``input_ids``
    ``(B, S)`` (``attention_mask``, ``token_type_ids``, token ``labels``, ...); other entries,
    such as per-sample ``labels`` ``(B,)``, are kept as they are. A batch no longer than
    `curr_seq_len` is returned as it is.

    Args:
        batch: a dict batch with ``input_ids`` (or, failing that, some tensor of at least two dims).
        curr_seq_len: the length to give the sequences.
        truncate: True keeps the first `curr_seq_len` tokens of each row. False keeps every
            token: the rows are concatenated in order and cut into rows of `curr_seq_len`
            (more rows), each entry following its tokens; the last row is padded with
            ``attention_mask`` 0, ``labels`` -100 and 0 elsewhere (an ``attention_mask`` is
            added where padding is needed and the batch has none). Every entry must then be a
            token sequence: a per-sample entry cannot follow samples that rows now mix.
        preserve_end_of_sequence: when truncating, write each row's last attended token (by
            ``attention_mask``, which the batch must have) at its new last position, so an end of
            sequence token survives. Ignored when ``truncate=False``.
    """
    check_int("curr_seq_len", curr_seq_len, ge=1)
    check_bool("truncate", truncate)
    check_bool("preserve_end_of_sequence", preserve_end_of_sequence)
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"`batch` must be a dict of tensors (input_ids, attention_mask, labels, ...), got a "
            f"{type(batch).__name__}: sequence length warmup needs the entries' names to find the token sequences"
        )
    reference = _reference(batch)
    size, length = reference.shape[:2]
    if curr_seq_len >= length:
        return dict(batch)
    keys = [k for k, v in batch.items() if isinstance(v, torch.Tensor) and v.shape[:2] == (size, length)]
    if truncate:
        return _truncate(batch, keys, curr_seq_len, preserve_end_of_sequence)
    return _reshape(batch, keys, curr_seq_len)


def _reference(batch: Mapping[str, Any]) -> torch.Tensor:
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor) and ids.ndim >= 2:
        return ids
    found = next((v for v in batch.values() if isinstance(v, torch.Tensor) and v.ndim >= 2), None)
    if found is None:
        raise ValueError(f"the batch holds no (batch, sequence) tensor to shorten: keys {sorted(batch)}")
    return found


def _truncate(batch: Mapping[str, Any], keys: list[str], length: int, preserve: bool) -> dict[str, Any]:
    out = dict(batch)
    if preserve:
        mask = batch.get("attention_mask")
        if mask is None or "attention_mask" not in keys:
            raise ValueError(
                "preserve_end_of_sequence=True finds each row's last token with the batch's (B, S) "
                f"'attention_mask', which this batch lacks (keys {sorted(batch)})"
            )
        positions = torch.arange(mask.shape[1], device=mask.device)
        last = (positions * (mask != 0)).amax(dim=1)  # the last attended position (0 for an empty row)
        rows = torch.arange(mask.shape[0], device=mask.device)
        kept = last.clamp(max=length - 1)
    for key in keys:
        short = batch[key][:, :length].clone()  # a copy: the caller's tensors are never written to
        if preserve:
            short[rows, kept] = batch[key][rows, last]
        out[key] = short
    return out


def _reshape(batch: Mapping[str, Any], keys: list[str], length: int) -> dict[str, Any]:
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and key not in keys:
            raise ValueError(
                f"truncate=False re-chunks the token stream into rows that mix samples, so {key!r} of shape "
                f"{tuple(value.shape)} cannot follow its tokens; only (B, S, ...) entries can. Use truncate=True, "
                "or drop the entry from the batch"
            )
    size, seq = batch[keys[0]].shape[:2]
    tokens = size * seq
    rows = -(-tokens // length)
    pad = rows * length - tokens
    out = dict(batch)
    if pad and "attention_mask" not in out:
        out["attention_mask"] = torch.ones((size, seq), dtype=torch.long, device=batch[keys[0]].device)
        keys = [*keys, "attention_mask"]
    for key in keys:
        flat = out[key].reshape(tokens, *out[key].shape[2:])
        if pad:
            fill = flat.new_full((pad, *flat.shape[1:]), PAD_VALUES.get(key, 0))
            flat = torch.cat([flat, fill])
        out[key] = flat.reshape(rows, length, *flat.shape[1:])
    return out
