"""Datasets by name (real ones skip when absent) and the device-resident loaders."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from cadence_harness.running import data
from cadence_harness.running.loaders import TensorLoader, batch_crop, batch_flip_lr, image_dataloader, make_augment


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
        data.find_dataset_files("cifar10", ["no_such_file.npz"], None)
    message = str(error.value)
    assert f"$CADENCE_DATA: {tmp_path / 'env'}" in message
    assert "../shared/data" in message and "/usr/share/datasets/fashion-mnist" in message
    assert "To get it: copy cifar10_jpeg.npz" in message


def test_a_data_dir_given_is_searched_alone_never_replaced_by_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "env"
    elsewhere.mkdir()
    (elsewhere / "sst2_train.tsv.gz").write_bytes(b"")
    (elsewhere / "sst2_dev.tsv.gz").write_bytes(b"")
    monkeypatch.setenv("CADENCE_DATA", str(elsewhere))
    names = ["sst2_train.tsv.gz", "sst2_dev.tsv.gz"]
    assert data.find_dataset_files("sst2", names, None) == elsewhere
    given = tmp_path / "given"
    given.mkdir()
    with pytest.raises(data.DataNotFoundError) as error:
        data.find_dataset_files("sst2", names, given)
    message = str(error.value)
    assert f"--data-dir (searched alone; leave it out to search $CADENCE_DATA and ../shared/data): {given}" in message
    assert "$CADENCE_DATA:" not in message
    from cadence_harness.cli import main

    argv = ["run", "--model", "hf/bert-tiny", "--data", "sst2", "--duration", "1ba", "--data-dir", str(given)]
    assert main(argv) == 2  # refused before anything trains, naming the folder
    assert "dataset 'sst2' not found" in capsys.readouterr().err


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


# CIFAR-10 from its JPEG archive, and the cache of decoded images ------------------------------------------------
@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty decoded-data cache of this test's own."""
    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(params=["generated", "real"])
def cifar10_folder(request: pytest.FixtureRequest, tmp_path: Path, jpeg_archive: Any) -> Path:
    """A folder holding cifar10_jpeg.npz: a small generated one (always), or the real one (skipped when absent)."""
    if request.param == "generated":
        return jpeg_archive(tmp_path / "generated")
    _skip_unless("cifar10", ["cifar10_jpeg.npz"])
    return data.find_dataset_files("cifar10", ["cifar10_jpeg.npz"], None)


def _pillow_decode(folder: Path, split: str, count: int) -> torch.Tensor:
    """The reference: each JPEG decoded by Pillow and converted to RGB, as uint8 (N, 3, H, W)."""
    with np.load(folder / "cifar10_jpeg.npz") as archive:
        blob, offsets = archive[f"jpeg_{split}"], archive[f"offsets_{split}"]
    images = [Image.open(io.BytesIO(blob[offsets[i] : offsets[i + 1]].tobytes())).convert("RGB") for i in range(count)]
    return torch.from_numpy(np.stack([np.asarray(image) for image in images])).permute(0, 3, 1, 2)


def test_cifar10_decodes_to_pillows_pixels_once_then_reads_the_cache(cifar10_folder: Path, cache: Path) -> None:
    first = data.load_dataset("cifar10", data_dir=cifar10_folder, subset=64, eval_subset=24)
    assert first.train_x.shape == (64, 3, 32, 32) and first.train_x.dtype == torch.uint8
    assert torch.equal(first.train_x, _pillow_decode(cifar10_folder, "train", 64))
    assert torch.equal(first.test_x, _pillow_decode(cifar10_folder, "test", 24))
    with np.load(cifar10_folder / "cifar10_jpeg.npz") as archive:
        assert first.train_y.tolist() == archive["y_train"][:64].tolist()
    files = sorted(cache.iterdir())
    assert [f.name.split("-")[:3] for f in files] == [["cifar10", "test", "24"], ["cifar10", "train", "64"]]
    stamps = [f.stat().st_mtime_ns for f in files]
    again = data.load_dataset("cifar10", data_dir=cifar10_folder, subset=64, eval_subset=24)
    assert torch.equal(first.train_x, again.train_x) and torch.equal(first.test_y, again.test_y)
    assert sorted(cache.iterdir()) == files and [f.stat().st_mtime_ns for f in files] == stamps  # read, not rewritten


def test_the_cache_key_follows_the_archive_and_the_count(tmp_path: Path, cache: Path, jpeg_archive: Any) -> None:
    folder = jpeg_archive(tmp_path / "source")
    data.load_dataset("cifar10", data_dir=folder, subset=10, eval_subset=10)
    data.load_dataset("cifar10", data_dir=folder, subset=12, eval_subset=None)  # None: the whole split (32)
    assert len(list(cache.glob("cifar10-train-*.npy"))) == 2 and len(list(cache.glob("cifar10-test-32-*"))) == 1
    jpeg_archive(folder, train=40)  # a new archive at the same path: new files, never the old pixels
    changed = data.load_dataset("cifar10", data_dir=folder, subset=12)
    assert len(list(cache.glob("cifar10-train-12-*.npy"))) == 2
    assert torch.equal(changed.train_x, _pillow_decode(folder, "train", 12))
    with pytest.raises(ValueError, match=r"train subset = 0: keep at least 1 image"):
        data.load_dataset("cifar10", data_dir=folder, subset=0)


@pytest.mark.parametrize(
    "damage", [lambda raw: raw[: len(raw) // 2], lambda raw: b"", lambda raw: raw[:64] + b"\0" * (len(raw) - 64)]
)
def test_a_truncated_or_damaged_cache_is_never_read_as_complete(
    tmp_path: Path, cache: Path, damage: Any, jpeg_archive: Any
) -> None:
    folder = jpeg_archive(tmp_path / "source")
    expected = data.load_dataset("cifar10", data_dir=folder, subset=20, eval_subset=8)
    (cached,) = cache.glob("cifar10-train-*.npy")
    cached.write_bytes(damage(cached.read_bytes()))
    with pytest.warns(UserWarning, match=r"the data cache .* decoding the JPEGs again and replacing it"):
        again = data.load_dataset("cifar10", data_dir=folder, subset=20, eval_subset=8)
    assert torch.equal(again.train_x, expected.train_x)
    assert np.array_equal(np.load(cached), expected.train_x.numpy())  # replaced by a whole file


def test_writers_at_once_each_rename_a_whole_file_of_their_own(tmp_path: Path) -> None:
    target = tmp_path / "shared.npy"
    with data.replace_when_complete(target) as first, data.replace_when_complete(target) as second:
        assert first.name != second.name and not target.exists()  # nothing half-written is ever at `target`
        np.save(first, np.zeros(3))
        np.save(second, np.ones(3))
    assert np.array_equal(np.load(target), np.zeros(3))  # the inner block renamed first, then the outer one
    with pytest.raises(RuntimeError, match="stopped"), data.replace_when_complete(target) as third:
        np.save(third, np.full(3, 7.0))
        raise RuntimeError("stopped while writing")
    assert np.array_equal(np.load(target), np.zeros(3)) and [p.name for p in tmp_path.iterdir()] == ["shared.npy"]


# Each child imports first, says "ready", and waits for a line on stdin: the parent releases them together.
_CHILD = """
import hashlib, json, sys
from cadence_harness.running import data
print("ready", flush=True)
sys.stdin.readline()
digests = {}
for count in range(int(sys.argv[2]), int(sys.argv[3]) + 1):  # a new cache file per count and split: many races
    loaded = data.load_dataset("cifar10", data_dir=sys.argv[1], subset=count, eval_subset=count)
    digests[count] = [hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in (loaded.train_x, loaded.test_x)]
print(json.dumps(digests), flush=True)
"""


def _load_in_processes(folder: Path, cache: Path, counts: range, processes: int) -> list[dict[str, list[str]]]:
    """What `processes` Python processes loading `folder`'s CIFAR-10 at each of `counts` into one cache got."""
    env = {**os.environ, "CADENCE_CACHE": str(cache)}
    command = [sys.executable, "-c", _CHILD, str(folder), str(counts.start), str(counts.stop - 1)]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    children = [subprocess.Popen(command, env=env, text=True, **pipes) for _ in range(processes)]  # type: ignore[call-overload]
    try:
        for child in children:
            if child.stdout.readline() != "ready\n":
                pytest.fail(f"a child process failed before loading:\n{child.communicate(timeout=60)[1][-3000:]}")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    failures = [err[-3000:] for child, (_, err) in zip(children, outputs) if child.returncode != 0]
    assert not failures, "\n---\n".join(failures)
    return [json.loads(out.splitlines()[-1]) for out, _ in outputs]


@pytest.mark.slow
def test_four_processes_on_a_cold_cache_all_get_the_same_pixels(cifar10_folder: Path, cache: Path) -> None:
    """Issue 27: grid runs started together on a cold cache crashed (they shared one temporary file)."""
    counts = range(20, 32)
    results = _load_in_processes(cifar10_folder, cache, counts, processes=4)
    expected = data.load_dataset("cifar10", data_dir=cifar10_folder, subset=counts[-1], eval_subset=counts[-1])
    assert all(result == results[0] for result in results)
    assert results[0][str(counts[-1])][0] == hashlib.sha256(expected.train_x.numpy().tobytes()).hexdigest()
    assert sorted(f.suffix for f in cache.iterdir()) == [".npy"] * (2 * len(counts))  # no temporary file left


def test_the_data_cache_benchmark_runs_on_a_small_archive(
    tmp_path: Path, cache: Path, capsys: Any, jpeg_archive: Any
) -> None:
    from cadence_harness.benchmarks import datacache

    datacache.main(["--data-dir", str(jpeg_archive(tmp_path / "source")), "--count", "8", "--repeats", "1"])
    printed = capsys.readouterr().out
    assert "8 images" in printed and "largest pixel difference: 0" in printed and "np.load (.npy)" in printed
