"""Datasets by name (real ones skip when absent) and the device-resident loaders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cadence_harness import data
from cadence_harness.loaders import TensorLoader, batch_crop, batch_flip_lr, image_dataloader, make_augment


def test_digits_is_always_there() -> None:
    digits = data.load_dataset("digits")
    assert digits.train_x.shape == (1437, 1, 8, 8) and digits.test_x.shape == (360, 1, 8, 8)
    assert digits.train_x.dtype == torch.uint8 and int(digits.train_x.max()) == 255
    assert set(digits.train_y.tolist()) == set(range(10))


def test_subsets_keep_the_first_samples() -> None:
    small = data.load_dataset("synthetic", subset=10, eval_subset=4)
    assert small.train_x.shape == (10, 3, 32, 32) and small.test_y.shape == (4,)
    text = data.load_dataset("synthetic_text", subset=6, eval_subset=3)
    assert len(text.train_text) == 6 and text.test_y.shape == (3,)


def test_a_missing_dataset_lists_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENCE_DATA", str(tmp_path / "env"))
    with pytest.raises(data.DataNotFoundError) as error:
        data.find_dataset_files("cifar10", ["no_such_file.npz"], tmp_path / "given")
    message = str(error.value)
    assert f"--data-dir: {tmp_path / 'given'}" in message and f"$CADENCE_DATA: {tmp_path / 'env'}" in message
    assert "../shared/data" in message and "/usr/share/datasets/fashion-mnist" in message
    assert "To get it: copy cifar10_jpeg.npz" in message


def test_data_dir_comes_first(tmp_path: Path) -> None:
    (tmp_path / "sst2_train.tsv.gz").write_bytes(b"")
    (tmp_path / "sst2_dev.tsv.gz").write_bytes(b"")
    assert data.find_dataset_files("sst2", ["sst2_train.tsv.gz", "sst2_dev.tsv.gz"], tmp_path) == tmp_path


def _skip_unless(dataset: str, names: list[str]) -> None:
    try:
        data.find_dataset_files(dataset, names, None)
    except data.DataNotFoundError:
        pytest.skip(f"{dataset} is not on this machine ({', '.join(names)}); see shared/data/README.md")


def test_fashion_mnist_from_the_debian_package_or_data_dir() -> None:
    _skip_unless("fashion_mnist", [f"{n}.gz" for n in data.FASHION_FILES])
    fashion = data.load_dataset("fashion_mnist", eval_subset=100)
    assert fashion.train_x.shape == (60000, 1, 28, 28) and fashion.test_x.shape == (100, 1, 28, 28)
    assert torch.bincount(fashion.train_y).tolist() == [6000] * 10


def test_cifar10_is_decoded_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _skip_unless("cifar10", ["cifar10_jpeg.npz"])
    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path))
    first = data.load_dataset("cifar10", subset=16, eval_subset=8)
    assert first.train_x.shape == (16, 3, 32, 32) and first.train_x.dtype == torch.uint8
    assert len(list(tmp_path.glob("cifar10-*.pt"))) == 2
    again = data.load_dataset("cifar10", subset=16, eval_subset=8)
    assert torch.equal(first.train_x, again.train_x)


def test_sst2_reads_train_and_dev() -> None:
    _skip_unless("sst2", ["sst2_train.tsv.gz", "sst2_dev.tsv.gz"])
    sst2 = data.load_dataset("sst2", subset=50)
    assert len(sst2.train_text) == 50 and len(sst2.test_text) == 872 and set(sst2.test_y.tolist()) == {0, 1}


def test_tensor_loader_batches_shuffles_per_epoch_and_repeats_per_seed() -> None:
    x, y = torch.arange(10 * 3 * 4 * 4, dtype=torch.uint8).reshape(10, 3, 4, 4), torch.arange(10)
    loader = TensorLoader((x, y), batch_size=4, shuffle=True, drop_last=True, seed=1)
    assert len(loader) == 2
    epoch0 = [b[1].tolist() for b in loader]
    epoch1 = [b[1].tolist() for b in loader]
    assert epoch0 != epoch1 and all(len(b) == 4 for b in epoch0)
    replay = TensorLoader((x, y), batch_size=4, shuffle=True, drop_last=True, seed=1)
    assert [b[1].tolist() for b in replay] == epoch0
    images, _ = next(iter(TensorLoader((x, y), batch_size=3, shuffle=False)))
    assert images.dtype == torch.float32 and torch.equal(images, x[:3].float() / 255)
    assert len(TensorLoader((x, y), batch_size=4, shuffle=False)) == 3


def test_peek_shows_the_first_batch_of_the_next_epoch_without_advancing() -> None:
    x, y = torch.randint(0, 256, (10, 3, 8, 8), dtype=torch.uint8), torch.arange(10)

    def loader() -> TensorLoader:
        return TensorLoader((x, y), batch_size=4, shuffle=True, drop_last=True, seed=3, augment=make_augment("flip", 8))

    peeked, untouched = loader(), loader()
    images, labels = peeked.peek()
    epochs, expected = [list(peeked) for _ in range(2)], [list(untouched) for _ in range(2)]
    assert torch.equal(images, expected[0][0][0]) and torch.equal(labels, expected[0][0][1])
    pairs = [(a, b) for got, want in zip(epochs, expected) for batches in zip(got, want) for a, b in zip(*batches)]
    assert len(pairs) == 8 and all(torch.equal(a, b) for a, b in pairs)


def test_text_batches_are_dicts_trimmed_to_their_longest_sample() -> None:
    ids = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0], [4, 5, 6, 0]])
    mask = (ids != 0).long()
    loader = TensorLoader(
        (ids, mask, torch.tensor([0, 1, 0])),
        batch_size=2,
        shuffle=False,
        keys=("input_ids", "attention_mask", "labels"),
        lengths=mask.sum(1),
    )
    first, second = list(loader)
    assert first["input_ids"].tolist() == [[1, 2], [3, 0]] and second["input_ids"].tolist() == [[4, 5, 6]]
    assert first["labels"].tolist() == [0, 1]


def test_batch_augmentations_keep_shape_and_pixels() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(6, 3, 8, 8, generator=generator)
    flipped = batch_flip_lr(images, generator)
    assert all(torch.equal(f, i) or torch.equal(f, i.flip(-1)) for f, i in zip(flipped, images))
    cropped = batch_crop(images, 2, generator)
    assert cropped.shape == images.shape
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2), mode="reflect")
    for out, source in zip(cropped, padded):  # each crop is some 8x8 window of its padded image
        windows = source.unfold(1, 8, 1).unfold(2, 8, 1).permute(1, 2, 0, 3, 4)
        assert any(torch.equal(out, w) for row in windows for w in row)
    augment = make_augment("flip_crop", 32)
    assert augment is not None and augment(torch.rand(2, 1, 32, 32), None).shape == (2, 1, 32, 32)
    assert make_augment("none", 32) is None


def test_the_dataloader_option_yields_floats_in_unit_range() -> None:
    x, y = torch.randint(0, 256, (8, 3, 8, 8), dtype=torch.uint8), torch.arange(8)
    loader = image_dataloader(x, y, batch_size=4, train=True, augment="flip_crop", num_workers=0)
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32 and 0 <= images.min() <= images.max() <= 1
