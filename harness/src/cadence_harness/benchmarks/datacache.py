"""CIFAR-10's first use: decoding its JPEGs and writing/reading the cache of decoded images, side by side.

* decode: Pillow one image at a time (the harness's decoder until issue 27) against torchvision's
  ``decode_jpeg`` on the whole list (the harness's decoder now); both on one thread, and their pixels compared;
* cache: the decoded uint8 (N, 3, 32, 32) array written (flushed and synced to disk) and read back as a raw
  ``.npy`` (``np.save``/``np.load``, the cache's format) against ``torch.save``/``torch.load`` of the same tensor.

Interleaved, the median of the repeats, wall clock. Reads are from the page cache (the file was just written).
Prints numbers; it is not a test and asserts nothing on time.

    python -m cadence_harness.benchmarks.datacache [--data-dir DIR] [--split train] [--count N] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence_harness.benchmarks.machine import cpu_description
from cadence_harness.running import data


def pillow_decode(blob: np.ndarray, offsets: np.ndarray, count: int) -> torch.Tensor:
    """Each JPEG opened by Pillow and converted to RGB, one after another: uint8 (N, 3, H, W)."""
    from PIL import Image

    images = [
        np.asarray(Image.open(io.BytesIO(blob[offsets[i] : offsets[i + 1]].tobytes())).convert("RGB"))
        for i in range(count)
    ]
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def _synced(path: Path, write: Callable[[Any], None]) -> None:
    with path.open("wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())


def measure(archive: Path, split: str, count: int | None, repeats: int) -> tuple[dict[str, float], int, int]:
    """Median seconds per step, the number of images, and the largest pixel difference between the decoders."""
    with np.load(archive) as arrays:
        blob, offsets = arrays[f"jpeg_{split}"], arrays[f"offsets_{split}"]
    count = len(offsets) - 1 if count is None else min(count, len(offsets) - 1)
    images = data.decode_jpegs(blob, offsets, count)
    difference = int((images.int() - pillow_decode(blob, offsets, count).int()).abs().max())
    with tempfile.TemporaryDirectory(dir=data.cache_dir()) as folder:
        npy, pt = Path(folder) / "images.npy", Path(folder) / "images.pt"
        steps: dict[str, Callable[[], object]] = {
            "decode: Pillow, one by one": lambda: pillow_decode(blob, offsets, count),
            "decode: torchvision decode_jpeg(list)": lambda: data.decode_jpegs(blob, offsets, count),
            "write: np.save (.npy)": lambda: _synced(npy, lambda h: np.save(h, images.numpy(), allow_pickle=False)),
            "read:  np.load (.npy)": lambda: torch.from_numpy(np.load(npy, allow_pickle=False)),
            "write: torch.save (.pt)": lambda: _synced(pt, lambda h: torch.save(images, h)),
            "read:  torch.load (.pt)": lambda: torch.load(pt, weights_only=True),
        }
        seconds: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(repeats):
            for name, step in steps.items():
                start = time.perf_counter()
                step()
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}, count, difference


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="folder of cifar10_jpeg.npz (default: the harness's search folders)")
    parser.add_argument("--split", choices=["train", "test"], default="train")
    parser.add_argument("--count", type=int, help="the first N images (default: the whole split)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    archive = data.find_dataset_files("cifar10", ["cifar10_jpeg.npz"], args.data_dir) / "cifar10_jpeg.npz"
    medians, count, difference = measure(archive, args.split, args.count, args.repeats)
    print(f"CIFAR-10 {args.split}, {count} images from {archive}; median of {args.repeats} interleaved runs")
    print(cpu_description())
    for name, value in medians.items():
        print(f"{name:<40} {value:7.3f} s")
    pillow, torchvision = medians["decode: Pillow, one by one"], medians["decode: torchvision decode_jpeg(list)"]
    print(f"decode_jpeg is {pillow / torchvision:.1f}x faster than Pillow; largest pixel difference: {difference}")
    write = medians["write: np.save (.npy)"] / medians["write: torch.save (.pt)"]
    read = medians["read:  np.load (.npy)"] / medians["read:  torch.load (.pt)"]
    print(f".npy against .pt: {write:.2f}x the time to write, {read:.2f}x the time to read")


if __name__ == "__main__":
    main()
