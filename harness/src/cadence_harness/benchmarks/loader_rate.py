"""The harness's loaders alone on the CPU, one thread: samples per second, and the shapes text batches take.

* images: `TensorLoader` with the recipes' ``flip_crop`` (flip, then a 4-pixel reflect-padded crop) on
  CIFAR-10's 50,000 training images at 32 px, batches of 512 (``FlipCrop.gather``: one copy per batch),
  beside the same batches made as before (gather, flip, pad-and-crop: ``FlipCrop.__call__``) and beside
  no augmentation. Goal (issue 27): >= 50k images/s.
* text: SST-2's 67,349 training phrases, tokenised once (BERT-Tiny's WordPiece, trained on the first
  10,000 as the recipe does; the second tokenisation in the process is read from the cache), batches of
  64 from `LengthBucketLoader` beside the former `TensorLoader` trimmed to each batch's longest
  phrase: samples/s, distinct batch widths (a GPU kernel may plan once per width) and the share of
  padding. Goal: >= 20k samples/s.

Real data from the shared data folder (``$CADENCE_DATA``, ``../shared/data``) when present, else synthetic
data, with a note. Rates are main-thread CPU time (steady on a shared machine) and wall clock; the median
of the repeats after a warm-up. Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.loader_rate [--repeats 3] [--images N] [--texts N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from cadence_harness.benchmarks.machine import cpu_description
from cadence_harness.running import data as datasets
from cadence_harness.running import loaders, text_loaders

IMAGE_GOAL, TEXT_GOAL = 50_000.0, 20_000.0
IMAGE_BATCH, TEXT_BATCH, MAX_LENGTH, TOKENIZER_TEXTS = 512, 64, 64, 10_000


class _PlainFlipCrop:
    """The same augmentation applied to a gathered batch (as the loader did before `FlipCrop.gather`)."""

    def __init__(self, padding: int):
        self.flip_crop = loaders.FlipCrop(padding)

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return self.flip_crop(images, generator)


def _rate(batches: Iterable[Any], count: Callable[[Any], int], repeats: int) -> tuple[float, float]:
    """(samples/s on main-thread CPU time, on the wall clock): the median of `repeats` passes over `batches` (a
    loader: each pass iterates it anew) after a warm-up."""
    cpu, wall = [], []
    for repeat in range(repeats + 1):
        start_cpu, start_wall = time.thread_time(), time.perf_counter()
        samples = sum(count(batch) for batch in batches)
        if repeat:
            cpu.append(samples / (time.thread_time() - start_cpu))
            wall.append(samples / (time.perf_counter() - start_wall))
    return statistics.median(cpu), statistics.median(wall)


def _images(limit: int | None) -> tuple[torch.Tensor, torch.Tensor, str]:
    try:
        found = datasets.load_dataset("cifar10", subset=limit)
    except datasets.DataNotFoundError:
        synthetic = datasets.synthetic_images(limit or 50_000, 16)
        return synthetic.train_x, synthetic.train_y, "synthetic images (cifar10_jpeg.npz not found)"
    assert isinstance(found, datasets.ImageData)
    return found.train_x, found.train_y, f"CIFAR-10 train from {found.source}"


def image_rows(limit: int | None, repeats: int) -> tuple[str, list[tuple[str, float, float]]]:
    """(where the images came from, [(loader, images/s CPU, images/s wall)])."""
    x, y, source = _images(limit)
    variants = {
        "TensorLoader, flip_crop (one gather)": loaders.make_augment("flip_crop", x.shape[-1]),
        "TensorLoader, flip then crop on the batch": _PlainFlipCrop(max(1, x.shape[-1] // 8)),
        "TensorLoader, no augmentation": None,
    }
    rows = []
    for name, augment in variants.items():
        loader = loaders.TensorLoader((x, y), batch_size=IMAGE_BATCH, shuffle=True, drop_last=True, augment=augment)
        rows.append((name, *_rate(loader, lambda batch: len(batch[1]), repeats)))
    return f"{source}: {len(y)} images {tuple(x.shape[1:])}, batches of {IMAGE_BATCH}", rows


def _texts(limit: int | None) -> tuple[list[str], torch.Tensor, str]:
    try:
        found = datasets.load_dataset("sst2", subset=limit)
    except datasets.DataNotFoundError:
        synthetic = datasets.synthetic_text(limit or 20_000, 16)
        return synthetic.train_text, synthetic.train_y, "synthetic text (sst2_train.tsv.gz not found)"
    assert isinstance(found, datasets.TextData)
    return found.train_text, found.train_y, f"SST-2 train from {found.source}"


def _shape_stats(loader: loaders.TensorLoader) -> tuple[int, float]:
    """(distinct batch widths in an epoch, share of the batch tokens that are padding)."""
    widths, tokens, real = set(), 0, 0
    for batch in loader:
        widths.add(batch["input_ids"].shape[1])
        tokens += batch["input_ids"].numel()
        real += int(batch["attention_mask"].sum())
    return len(widths), 1 - real / tokens


def text_rows(limit: int | None, repeats: int) -> tuple[str, list[str], list[tuple[str, float, float, int, float]]]:
    """(source, notes on tokenising, [(loader, samples/s CPU, samples/s wall, widths, padding share)])."""
    from cadence_harness.running.text_tokenizers import build_tokenizer

    texts, labels, source = _texts(limit)
    tokenizer = build_tokenizer("hf/bert-tiny", texts[:TOKENIZER_TEXTS])
    notes = []
    for attempt in ("first", "again (cache)"):
        start = time.perf_counter()
        encoded = text_loaders.encoded_texts(tokenizer, texts, MAX_LENGTH)
        notes.append(f"tokenising {len(texts)} texts, {attempt}: {time.perf_counter() - start:.2f} s")
    lengths = encoded["attention_mask"].sum(1)
    tensors, keys = (*encoded.values(), labels), (*encoded, "labels")
    variants: dict[str, loaders.TensorLoader] = {
        "LengthBucketLoader (by length, x16)": text_loaders.LengthBucketLoader(
            tensors, keys=keys, lengths=lengths, batch_size=TEXT_BATCH, shuffle=True, drop_last=True
        ),
        "TensorLoader (trimmed to longest)": loaders.TensorLoader(
            tensors, batch_size=TEXT_BATCH, shuffle=True, drop_last=True, keys=keys, lengths=lengths
        ),
    }
    rows = []
    for name, loader in variants.items():
        rate = _rate(loader, lambda batch: len(batch["labels"]), repeats)
        rows.append((name, *rate, *_shape_stats(loader)))
    return f"{source}: {len(texts)} texts, max_length {MAX_LENGTH}, batches of {TEXT_BATCH}", notes, rows


def _verdict(rate: float, goal: float) -> str:
    return f">= {goal / 1000:.0f}k/s: {'PASS' if rate >= goal else 'FAIL'}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--images", type=int, default=None, help="the first N training images (default: all)")
    parser.add_argument("--texts", type=int, default=None, help="the first N training texts (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"loaders alone: CPU, 1 thread, median of {args.repeats} passes after a warm-up")
    print(f"{cpu_description()}; torch {torch.__version__}")
    described, rows = image_rows(args.images, args.repeats)
    print(f"\nimages: {described}")
    print(f"{'loader':<44} {'img/s CPU':>10} {'img/s wall':>11}")
    for index, (name, cpu, wall) in enumerate(rows):
        print(f"{name:<44} {cpu:10.0f} {wall:11.0f}  {_verdict(cpu, IMAGE_GOAL) if index == 0 else ''}")
    described, notes, text = text_rows(args.texts, args.repeats)
    print(f"\ntext: {described}")
    for note in notes:
        print(f"  {note}")
    print(f"{'loader':<44} {'samples/s CPU':>13} {'wall':>9} {'widths':>7} {'padding':>8}")
    for index, (name, cpu, wall, widths, padding) in enumerate(text):
        verdict = _verdict(cpu, TEXT_GOAL) if index == 0 else ""
        print(f"{name:<44} {cpu:13.0f} {wall:9.0f} {widths:7d} {padding:8.1%}  {verdict}")


if __name__ == "__main__":
    main()
