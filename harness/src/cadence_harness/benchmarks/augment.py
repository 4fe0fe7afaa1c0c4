"""Augmentation costs on the CPU, one thread: batched functions against a loop of per-image calls.

For RandAugment and AugMix (default hyperparameters), ``randaugment_batch``/``augmix_batch``
transform a uint8 batch in one call; the reference is a Python loop of
``randaugment_image``/``augmix_image`` over the same images, as a dataset transform would run
them. Both run in this process, interleaved: one warm-up, then the median of several repeats.
Then the per-batch cost of the other batch augmentations (MixUp, CutMix, CutOut, ColOut) on
64x3x32x32 float images. Methods that are not installed are reported as such. Prints numbers;
it is not a test.

    python -m cadence_harness.benchmarks.augment
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import cadence.functional as cf

SHAPES = ((64, 3, 32, 32), (16, 3, 224, 224))
REPEATS = 7
METHOD_SHAPE = (64, 3, 32, 32)


def _function(name: str) -> Callable[..., Any] | None:
    try:
        return getattr(cf, name)
    except AttributeError:
        return None


def _median_ms(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Warm each call up once, then time them interleaved; the median of each, in milliseconds."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def _images(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(shape, generator=generator)
    return (images * 255).round().to(torch.uint8) if dtype == torch.uint8 else images


def batched_vs_per_image(repeats: int = REPEATS) -> list[tuple[str, str, float | None, float | None]]:
    """(method, shape, per-image loop ms, batched ms) rows; None where the method is missing."""
    rows = []
    for method in ("randaugment", "augmix"):
        per_image, batched = _function(f"{method}_image"), _function(f"{method}_batch")
        for shape in SHAPES:
            label = "x".join(map(str, shape)) + " uint8"
            if per_image is None or batched is None:
                rows.append((method, label, None, None))
                continue
            images = _images(shape, torch.uint8)
            generator = torch.Generator().manual_seed(0)
            timings = _median_ms(
                {
                    "loop": lambda f=per_image, x=images, g=generator: [f(image, generator=g) for image in x],
                    "batched": lambda f=batched, x=images, g=generator: f(x, generator=g),
                },
                repeats,
            )
            rows.append((method, label, timings["loop"], timings["batched"]))
    return rows


def method_costs(repeats: int = REPEATS) -> list[tuple[str, float | None]]:
    """(function, ms per batch) on 64x3x32x32 float images; None where it is not installed."""
    images = _images(METHOD_SHAPE, torch.float32)
    targets = torch.randint(0, 10, (METHOD_SHAPE[0],), generator=torch.Generator().manual_seed(1))
    calls = {
        "mixup_batch": lambda f: f(images, targets),
        "cutmix_batch": lambda f: f(images, targets),
        "cutout_batch": lambda f: f(images),
        "colout_batch": lambda f: f(images),
    }
    rows: list[tuple[str, float | None]] = []
    for name, call in calls.items():
        function = _function(name)
        if function is None:
            rows.append((name, None))
            continue
        rows.append((name, _median_ms({name: lambda c=call, f=function: c(f)}, repeats)[name]))
    return rows


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 CPU thread; median of {REPEATS} interleaved repeats after a warm-up\n")
    print(f"{'method':<12} {'batch':<22} {'per-image loop':>15} {'batched':>10} {'speed-up':>9}")
    for method, shape, loop, batched in batched_vs_per_image():
        if loop is None or batched is None:
            print(f"{method:<12} {shape:<22} {'not installed':>15}")
        else:
            print(f"{method:<12} {shape:<22} {loop:>12.2f} ms {batched:>7.2f} ms {loop / batched:>8.1f}x")
    print(f"\nper-batch cost on {'x'.join(map(str, METHOD_SHAPE))} float32 images")
    for name, cost in method_costs():
        print(f"{name:<14} {'not installed' if cost is None else f'{cost:.3f} ms':>14}")


if __name__ == "__main__":
    main()
