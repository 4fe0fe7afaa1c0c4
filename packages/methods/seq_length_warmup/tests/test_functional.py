"""warmup_seq_length and set_batch_sequence_length against their definitions (and Composer's, where it has one)."""

from __future__ import annotations

import itertools

import pytest
import torch
from cadence_seq_length_warmup import set_batch_sequence_length, warmup_seq_length

from cadence.testing import HOST_SYNC_OPS, recording_ops


def _composer_schedule(batch: int, warmup: int, low: int, high: int, step: int) -> int:
    """Composer's SeqLengthWarmup.apply, line by line (it divides by zero outside the cases tested here)."""
    num_update_steps = (high - low) // step
    update_every_n_steps = warmup // num_update_steps
    length = step * (batch // update_every_n_steps) + low
    return min(max(length, low), high)


# The schedule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("low", "high", "step"), [(8, 1024, 8), (8, 64, 8), (4, 16, 4), (16, 32, 16)])
def test_the_schedule_is_composers_wherever_composers_is_defined(low: int, high: int, step: int) -> None:
    steps = (high - low) // step
    for warmup in range(steps, steps + 40):
        for batch in range(0, 2 * warmup + 2):
            expected = _composer_schedule(batch, warmup, low, high, step)
            assert warmup_seq_length(batch, warmup, low, high, step) == expected, (batch, warmup)


def test_a_hand_computed_schedule() -> None:
    # 3 increases of 8 over a 10-batch warmup: one every 10 // 3 = 3 batches
    assert [warmup_seq_length(b, 10, 8, 32, 8) for b in range(12)] == [8, 8, 8, 16, 16, 16, 24, 24, 24, 32, 32, 32]


def test_the_edges_are_defined() -> None:
    assert [warmup_seq_length(b, 0, 8, 32, 8) for b in range(3)] == [32, 32, 32]  # no warmup: full length
    assert [warmup_seq_length(b, 5, 16, 16, 8) for b in range(3)] == [16, 16, 16]  # nothing to warm up
    # a warmup shorter than the 3 increases takes several per batch and still ends on time
    assert [warmup_seq_length(b, 2, 8, 32, 8) for b in range(4)] == [8, 16, 32, 32]
    assert [warmup_seq_length(b, 1, 8, 32, 8) for b in range(3)] == [8, 32, 32]
    # a step that does not divide max - min: the last increase is clipped, reached within the warmup
    assert [warmup_seq_length(b, 6, 8, 20, 8) for b in range(8)] == [8, 8, 8, 16, 16, 16, 20, 20]
    assert [warmup_seq_length(b, 4, 8, 12, 8) for b in range(6)] == [8, 8, 8, 8, 12, 12]


def test_every_schedule_grows_from_min_to_max_within_the_warmup() -> None:
    for low, high, step, warmup in itertools.product((1, 8), (8, 13, 40), (1, 3, 8), range(0, 30)):
        if high < low:
            continue
        lengths = [warmup_seq_length(b, warmup, low, high, step) for b in range(warmup + 3)]
        assert lengths == sorted(lengths) and lengths[warmup] == high, (low, high, step, warmup)
        assert all(low <= n <= high and (n == high or (n - low) % step == 0) for n in lengths)
        assert warmup == 0 or high == low or lengths[0] == low


# Truncating --------------------------------------------------------------------------------------
def _batch(lengths: list[int], seq: int = 8, token_labels: bool = False) -> dict[str, torch.Tensor]:
    """Right-padded rows of ids 1.. (0 is padding), with mask, token types and labels."""
    ids = torch.zeros(len(lengths), seq, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(1, n + 1) + 100 * row
    mask = (ids != 0).long()
    labels = ids.masked_fill(mask == 0, -100) if token_labels else torch.arange(len(lengths))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": mask.clone(), "labels": labels}


def test_truncating_keeps_the_first_tokens_and_per_sample_entries() -> None:
    batch = _batch([8, 5, 2])
    before = {k: v.clone() for k, v in batch.items()}
    out = set_batch_sequence_length(batch, 4)
    assert out.keys() == batch.keys() and out["labels"] is batch["labels"]  # (B,): a per-sample entry
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(out[key], before[key][:, :4]) and out[key].is_contiguous()
    assert all(torch.equal(batch[k], before[k]) for k in batch)  # the caller's batch is unchanged
    embeddings = torch.randn(3, 8, 5, dtype=torch.float64)  # a (B, S, D) entry is a sequence too
    out = set_batch_sequence_length({**batch, "inputs_embeds": embeddings, "mask": batch["attention_mask"].bool()}, 4)
    assert torch.equal(out["inputs_embeds"], embeddings[:, :4]) and out["inputs_embeds"].dtype == torch.float64
    assert out["mask"].dtype == torch.bool and out["mask"].shape == (3, 4)


def test_a_batch_no_longer_than_the_length_is_unchanged() -> None:
    batch = _batch([8, 3])
    for length in (8, 9, 1024):
        out = set_batch_sequence_length(batch, length, truncate=False)
        assert out is not batch and all(out[k] is batch[k] for k in batch)


def test_preserve_end_of_sequence_keeps_each_rows_last_token() -> None:
    ids = torch.tensor([[10, 11, 12, 13, 14, 15]])  # Composer's docstring example
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    assert torch.equal(set_batch_sequence_length(batch, 3)["input_ids"], torch.tensor([[10, 11, 12]]))
    out = set_batch_sequence_length(batch, 3, preserve_end_of_sequence=True)
    assert torch.equal(out["input_ids"], torch.tensor([[10, 11, 15]]))
    batch = _batch([8, 5, 2], token_labels=True)  # right padding: the last token is at length - 1
    out = set_batch_sequence_length(batch, 4, preserve_end_of_sequence=True)
    assert torch.equal(out["input_ids"], torch.tensor([[1, 2, 3, 8], [101, 102, 103, 105], [201, 202, 0, 0]]))
    assert torch.equal(out["labels"], out["input_ids"].masked_fill(out["input_ids"] == 0, -100))
    assert torch.equal(out["attention_mask"], torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]))
    with pytest.raises(ValueError, match="preserve_end_of_sequence=True finds each row's last token"):
        set_batch_sequence_length({"input_ids": ids}, 3, preserve_end_of_sequence=True)


# Reshaping ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("lengths", "length"), [([8, 8, 8], 6), ([8, 8, 8], 5), ([8, 3], 3), ([7], 2)])
def test_reshaping_keeps_every_token_in_order(lengths: list[int], length: int) -> None:
    batch = _batch(lengths, token_labels=True)
    out = set_batch_sequence_length(batch, length, truncate=False)
    tokens = batch["input_ids"].numel()
    rows, pad = -(-tokens // length), -tokens % length
    assert all(v.shape == (rows, length) for v in out.values())  # every entry, the same shape
    for key, fill in (("input_ids", 0), ("attention_mask", 0), ("token_type_ids", 0), ("labels", -100)):
        flat = out[key].flatten()
        assert torch.equal(flat[:tokens], batch[key].flatten())  # each entry follows its tokens, in order
        assert bool((flat[tokens:] == fill).all()) and flat[tokens:].numel() == pad


def test_reshaping_masks_the_padding_it_adds() -> None:
    ids = torch.arange(1, 13).view(2, 6)
    out = set_batch_sequence_length({"input_ids": ids}, 5, truncate=False)  # 12 tokens -> 3 rows of 5
    assert torch.equal(out["attention_mask"], torch.tensor([[1] * 5, [1] * 5, [1, 1, 0, 0, 0]]))
    out = set_batch_sequence_length({"input_ids": ids}, 4, truncate=False)  # no padding: nothing added
    assert out.keys() == {"input_ids"} and torch.equal(out["input_ids"], ids.view(3, 4))


def test_reshaping_refuses_entries_that_cannot_follow_their_tokens() -> None:
    with pytest.raises(ValueError, match=r"'labels' of shape \(2,\).*truncate=True"):
        set_batch_sequence_length(_batch([8, 8]), 4, truncate=False)


# Inputs and arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [(torch.ones(2, 8), torch.ones(2)), torch.ones(2, 8), [torch.ones(2, 8)]])
def test_non_dict_batches_are_refused_clearly(batch: object) -> None:
    with pytest.raises(TypeError, match="`batch` must be a dict of tensors"):
        set_batch_sequence_length(batch, 4)  # type: ignore[arg-type]


def test_a_dict_without_sequences_is_refused() -> None:
    with pytest.raises(ValueError, match="no \\(batch, sequence\\) tensor"):
        set_batch_sequence_length({"labels": torch.ones(4)}, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"curr_seq_len": 0}, "`curr_seq_len`=0"), ({"curr_seq_len": 2.0}, "`curr_seq_len`=2.0"),
     ({"curr_seq_len": True}, "`curr_seq_len`=True"), ({"curr_seq_len": 4, "truncate": "no"}, "`truncate`='no'"),
     ({"curr_seq_len": 4, "preserve_end_of_sequence": 1}, "`preserve_end_of_sequence`=1")],
)  # fmt: skip
def test_bad_arguments_are_refused_naming_them(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        set_batch_sequence_length(_batch([8]), **kwargs)


def test_no_host_synchronisation() -> None:
    batch = _batch([8, 5, 2], token_labels=True)
    with recording_ops() as names:
        set_batch_sequence_length(batch, 4, preserve_end_of_sequence=True)
        set_batch_sequence_length(batch, 5, truncate=False)
    assert not names & HOST_SYNC_OPS, names & HOST_SYNC_OPS
