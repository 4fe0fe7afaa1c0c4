"""The loaders that feed a run: images flipped and cropped in one gather, text tokenised once and batched by length."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from cadence_harness.running import run, text_loaders
from cadence_harness.running.loaders import (
    AlternatingFlipTranslate,
    FlipCrop,
    TensorLoader,
    alternating_flip,
    batch_crop,
    batch_flip_lr,
    make_augment,
)
from cadence_harness.running.text_loaders import LengthBucketLoader, encoded_texts


def _pad_then_index(images: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """batch_crop as it was written first: reflect-pad both sides, then one advanced-indexing gather."""
    n, c, h, w = images.shape
    padded = F.pad(images, (padding,) * 4, mode="reflect")
    dy = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator)
    rows = (dy + torch.arange(h))[:, None, :, None]
    cols = (dx + torch.arange(w))[:, None, None, :]
    return padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]


@pytest.mark.parametrize("shape", [(5, 3, 32, 32), (4, 1, 28, 28), (3, 2, 7, 9)])
def test_batch_crop_draws_and_crops_as_padding_then_indexing(shape: tuple[int, ...]) -> None:
    images = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    for padding in range(min(shape[2:])):
        expected = _pad_then_index(images, padding, torch.Generator().manual_seed(padding))
        assert torch.equal(batch_crop(images, padding, torch.Generator().manual_seed(padding)), expected)
    with pytest.raises(ValueError, match=r"padding=7 must be an int in \[0, 7\)"):
        batch_crop(images[..., :7, :7], 7)


@pytest.mark.parametrize("kind", ["flip", "flip_crop"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_the_loader_gathers_the_batches_flip_then_crop_would_make(kind: str, dtype: torch.dtype) -> None:
    x = torch.randint(0, 256, (23, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)).to(dtype)
    y = torch.arange(23)
    augment = make_augment(kind, 16)
    assert isinstance(augment, FlipCrop) and augment.padding == (2 if kind == "flip_crop" else 0)
    fused = TensorLoader((x, y), batch_size=5, shuffle=True, drop_last=True, seed=4, augment=augment)

    def on_the_batch(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        flipped = batch_flip_lr(images, generator)
        return batch_crop(flipped, 2, generator) if kind == "flip_crop" else flipped

    plain = TensorLoader((x, y), batch_size=5, shuffle=True, drop_last=True, seed=4, augment=on_the_batch)
    pairs = [(a, b) for _ in range(2) for a, b in zip(fused, plain)]
    assert len(pairs) == 8
    for (images, labels), (expected, expected_labels) in pairs:
        assert images.dtype == torch.float32 and torch.equal(images, expected) and torch.equal(labels, expected_labels)
    assert not torch.equal(pairs[0][0][0], x[pairs[0][0][1]].float() / (255 if dtype == torch.uint8 else 1))


class _AlternatingOnTheBatch:
    """airbench's augmentation as it ran before `gather`: on the gathered batch, flip then translate."""

    positional = True

    def __init__(self, padding: int, seed: int) -> None:
        self.padding, self.seed = padding, seed

    def __call__(self, images: torch.Tensor, generator: Any, *, index: torch.Tensor, epoch: int) -> torch.Tensor:
        return batch_crop(alternating_flip(images, index, epoch, self.seed), self.padding, generator)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_the_alternating_flip_and_translate_gathers_the_batches_the_batch_path_made(dtype: torch.dtype) -> None:
    x = torch.randint(0, 256, (23, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)).to(dtype)
    y = torch.arange(23)
    augment = make_augment("alt_flip_translate", 16, seed=3)
    assert isinstance(augment, AlternatingFlipTranslate) and augment.padding == 1
    fused = TensorLoader((x, y), batch_size=5, shuffle=True, drop_last=True, seed=4, augment=augment)
    plain = TensorLoader(
        (x, y), batch_size=5, shuffle=True, drop_last=True, seed=4, augment=_AlternatingOnTheBatch(1, 3)
    )
    pairs = [(a, b) for _ in range(3) for a, b in zip(fused, plain)]  # epochs 0, 1, 2: both parities of the flip
    assert len(pairs) == 12
    for (images, labels), (expected, expected_labels) in pairs:
        assert images.dtype == torch.float32 and torch.equal(images, expected) and torch.equal(labels, expected_labels)
    # the gather alone, from a new dataset (the tables follow it), against the batch path
    z = torch.rand(9, 2, 8, 8, generator=torch.Generator().manual_seed(5))
    index = torch.tensor([8, 0, 3, 3])
    for epoch in (0, 1):
        got = augment.gather(z, index, torch.Generator().manual_seed(epoch), epoch=epoch)
        want = augment(z[index], torch.Generator().manual_seed(epoch), index=index, epoch=epoch)
        assert torch.equal(got, want)


def test_flip_crop_follows_the_dataset_it_is_given() -> None:
    augment = FlipCrop(1)
    first, second = torch.zeros(4, 1, 4, 4), torch.ones(6, 1, 4, 4)
    assert augment.gather(first, torch.tensor([0, 3]), None).sum() == 0
    assert torch.equal(augment.gather(second, torch.tensor([5, 1]), None), torch.ones(2, 1, 4, 4))


def _text_tensors(lengths: list[int], width: int = 40) -> tuple[torch.Tensor, ...]:
    """input_ids (sample number + 1 at every real position), attention_mask, labels; padded to `width`."""
    count = len(lengths)
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    return (torch.arange(1, count + 1)[:, None] * mask, mask, torch.arange(count) % 2)


def _bucketed(lengths: list[int], device: str = "cpu", **kwargs: Any) -> LengthBucketLoader:
    ids, mask, labels = _text_tensors(lengths)
    settings = {"batch_size": 4, "shuffle": True, "drop_last": True, "seed": 3, "multiple": 8, "pool_batches": 2}
    return LengthBucketLoader(
        tuple(t.to(device) for t in (ids, mask, labels)),
        keys=("input_ids", "attention_mask", "labels"),
        lengths=mask.sum(1),
        **{**settings, **kwargs},
    )


LENGTHS = [int(n) for n in torch.randint(1, 41, (50,), generator=torch.Generator().manual_seed(0))]


def test_length_buckets_cover_each_sample_once_on_a_coarse_grid_of_widths() -> None:
    loader = _bucketed(LENGTHS)
    assert len(loader) == 12 and loader.widths() == [8, 16, 24, 32, 40]
    for _ in range(2):
        batches = list(loader)
        seen = torch.cat([b["input_ids"][:, 0] for b in batches]) - 1
        assert len(batches) == 12 and len(set(seen.tolist())) == 48  # drop_last: 2 of 50 left out, none twice
        for batch in batches:
            width, real = batch["input_ids"].shape[1], batch["attention_mask"].sum(1)
            assert width in loader.widths() and width - 8 < int(real.max()) <= width  # the next multiple of 8
            assert torch.equal(real, torch.tensor([LENGTHS[i - 1] for i in batch["input_ids"][:, 0].tolist()]))
            assert torch.equal(batch["labels"], (batch["input_ids"][:, 0] - 1) % 2)


def test_length_buckets_pad_less_than_random_batches() -> None:
    ids, mask, labels = _text_tensors(LENGTHS)
    keys, lengths = ("input_ids", "attention_mask", "labels"), mask.sum(1)
    random = TensorLoader((ids, mask, labels), batch_size=4, shuffle=True, drop_last=True, keys=keys, lengths=lengths)

    def padded_tokens(loader: TensorLoader) -> int:
        return sum(b["input_ids"].numel() for b in loader)

    assert padded_tokens(_bucketed(LENGTHS, multiple=1, pool_batches=12)) < padded_tokens(random)


def test_length_buckets_repeat_per_seed_and_epoch_and_peek_advances_nothing() -> None:
    def epochs(loader: LengthBucketLoader) -> list[list[list[int]]]:
        return [[b["input_ids"][:, 0].tolist() for b in loader] for _ in range(2)]

    peeked = _bucketed(LENGTHS)
    first = peeked.peek()
    runs = epochs(peeked)
    assert runs == epochs(_bucketed(LENGTHS)) and runs[0] != runs[1]
    assert first["input_ids"][:, 0].tolist() == runs[0][0]
    assert runs != epochs(_bucketed(LENGTHS, seed=4))


def test_evaluation_batches_go_shortest_first_and_keep_every_sample() -> None:
    loader = _bucketed(LENGTHS, shuffle=False, drop_last=False)
    batches = list(loader)
    order = torch.cat([b["input_ids"][:, 0] for b in batches]) - 1
    assert len(batches) == 13 and sorted(order.tolist()) == list(range(50))
    assert [LENGTHS[i] for i in order.tolist()] == sorted(LENGTHS)


def test_length_buckets_refuse_bad_settings() -> None:
    with pytest.raises(ValueError, match="multiple=0 must be an int >= 1"):
        _bucketed(LENGTHS, multiple=0)
    ids, mask, labels = _text_tensors(LENGTHS)
    with pytest.raises(ValueError, match=r"lengths must be a CPU tensor of one count per sample, shape \(50,\)"):
        LengthBucketLoader(
            (ids, mask, labels), keys=("a", "b", "c"), lengths=mask.sum(1)[:3], batch_size=2, shuffle=True
        )


TEXTS = [f"the {word} film was {'good' if i % 2 else 'dull'} and {word}" for i, word in enumerate("abcdefghij" * 3)]


def test_texts_are_tokenised_once_per_process_for_the_same_tokenizer_texts_and_length() -> None:
    from cadence_harness.running.text_tokenizers import build_tokenizer

    text_loaders.clear_token_cache()
    tokenizer = build_tokenizer("hf/gpt2-tiny", TEXTS, vocab_size=300)
    encoded = encoded_texts(tokenizer, TEXTS, 16)
    assert encoded_texts(tokenizer, TEXTS, 16) is encoded  # after the first call set the tokenizer's truncation
    assert encoded_texts(copy.deepcopy(tokenizer), list(TEXTS), 16) is encoded  # the same content is the same key
    assert encoded_texts(tokenizer, TEXTS, 8) is not encoded and encoded_texts(tokenizer, TEXTS[1:], 16) is not encoded
    blocks = text_loaders.language_blocks(tokenizer, TEXTS, 8)
    assert text_loaders.language_blocks(tokenizer, TEXTS, 8) is blocks and blocks["input_ids"].shape[1] == 8
    text_loaders.clear_token_cache()
    assert encoded_texts(tokenizer, TEXTS, 16) is not encoded


def test_a_text_run_batches_by_length(tiny_recipe: Any) -> None:
    recipe = tiny_recipe(model="hf/bert-tiny", data="synthetic_text", max_length=16, subset=64, eval_subset=32)
    data = run.build_data(recipe, 0, torch.device("cpu"), None, False)
    assert isinstance(data.train, LengthBucketLoader) and isinstance(data.eval, LengthBucketLoader)
    widths = {b["input_ids"].shape[1] for loader in (data.train, data.eval) for b in loader}
    assert widths <= set(data.train.widths()) and set(next(iter(data.train))) == {
        "input_ids",
        "attention_mask",
        "labels",
    }


@pytest.mark.gpu
def test_the_loaders_never_wait_for_the_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    device = torch.device("cuda")
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, device=device)
    images = TensorLoader(
        (x, torch.arange(64, device=device)),
        batch_size=8,
        shuffle=True,
        drop_last=True,
        augment=make_augment("flip_crop", 32),
    )
    text = _bucketed(LENGTHS, device="cuda")
    for loader in (images, text):
        list(loader)  # the first epoch prepares (FlipCrop's padded copy of the dataset)
        batches = iter(loader)
        first = next(batches)  # an epoch starts with one copy of its order (pinned, asynchronous)
        torch.cuda.set_sync_debug_mode("error")
        try:
            rest = list(batches)  # no batch waits for the device
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert len(rest) == len(loader) - 1 and first is not None


def test_batches_in_order_are_read_as_rows_and_copied_once() -> None:
    """An evaluation loader (no shuffle) reads each batch's rows as a view that the [0, 1] scaling copies: the
    same batches as gathering them, and nothing the model does to a batch reaches the data set."""
    images = torch.randint(0, 256, (10, 3, 4, 4), dtype=torch.uint8)
    labels = torch.arange(10)
    loader = TensorLoader((images, labels), batch_size=4, shuffle=False)
    batches = list(loader)
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    for start, (x, y) in zip(range(0, 10, 4), batches):
        assert torch.equal(x, images[start : start + 4].float() / 255) and torch.equal(y, labels[start : start + 4])
    before = images.clone()
    batches[0][0].zero_()
    assert torch.equal(images, before)
    for rank, rows in enumerate([[[0, 1], [4, 5], [8]], [[2, 3], [6, 7], [9]]]):  # each rank's share: its rows
        shares = list(TensorLoader((images, labels), batch_size=4, shuffle=False, rank=rank, world_size=2))
        assert [s[1].tolist() for s in shares] == rows
        assert torch.equal(shares[0][0], images[[2 * rank, 2 * rank + 1]].float() / 255)
