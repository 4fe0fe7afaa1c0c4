"""Augmentation costs on the CPU, one thread: batched functions against per-image implementations.

For RandAugment and AugMix (default hyperparameters) on a uint8 batch, three ways side by side:

* ``PIL per-image``: Composer 0.32.1's per-image path, the strongest per-image implementation: each
  image of the batch goes to PIL and through Composer's operations (``ImageOps``/``ImageEnhance``/
  ``Image.transform``, bilinear; the same op sets, severity-to-magnitude mapping and depth, NumPy's
  legacy RNG, AugMix's float32 Dirichlet/Beta mixing and uint8 truncation), and back to a tensor, as
  Composer's ``map_pillow_function`` does for tensors. Written here after Composer's behaviour
  (Composer itself cannot be installed next to this torch); needs Pillow and NumPy.
* ``own loop``: a Python loop of ``randaugment_image``/``augmix_image`` over the images.
* ``batched``: ``randaugment_batch``/``augmix_batch`` in one call.

Targets (issue 13): batched >= 10x faster than PIL per-image at 64x3x32x32, and never slower than the
own loop at 16x3x224x224. All run in this process, interleaved: a warm-up, then the median of the
repeats. Then where the batched time goes: a line through its costs at 8, 64 and 256 images of 32x32
splits it into a cost per call and a cost per sample; against PIL's cost per sample, the latter bounds
the ratio to PIL at any batch size. Then the per-batch cost of the other batch augmentations on
64x3x32x32 float images.
Prints numbers and pass/fail marks; it is not a test and asserts nothing on time.

    python -m cadence_harness.benchmarks.augment [--repeats 7] [--clock wall|cpu]

``--clock cpu`` times with the thread's CPU time instead of the wall clock: on a machine that other
jobs share, it leaves out the time the benchmark waits for a core (everything here runs on one thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

import cadence.functional as cf
from cadence_harness.benchmarks.machine import cpu_description

SHAPES = ((64, 3, 32, 32), (16, 3, 224, 224))
REPEATS = 7
METHOD_SHAPE = (64, 3, 32, 32)
PIL_TARGET = (SHAPES[0], 10.0)  # batched >= 10x PIL per-image at this shape
LOOP_TARGET = (SHAPES[1], 1.0)  # batched >= 1x the own loop at this shape
SCALING_SIZES, SCALING_IMAGE = (8, 64, 256), (3, 32, 32)  # batch sizes of the cost lines, and their image


# Composer's per-image path, after composer/algorithms/utils/augmentation_primitives.py -------------


def _pil_operations() -> dict[str, Callable[[Any, float, Any], Any]]:
    """Composer's 13 operations of the 'all' set: (PIL image, severity, NumPy RandomState) -> PIL image."""
    from PIL import Image, ImageEnhance, ImageOps

    def level(rng: Any, severity: float) -> float:  # U[0.1, severity)
        return rng.uniform(0.1, severity)

    def signed(rng: Any, value: float) -> float:
        return -value if rng.uniform() > 0.5 else value

    def symmetric(rng: Any, severity: float) -> float:  # factors below and above 1 with probability 1/2
        return rng.uniform(1, severity) if rng.uniform() > 0.5 else rng.uniform(1 - 0.09 * severity, 1)

    def affine(image: Any, matrix: tuple[float, ...]) -> Any:
        return image.transform(image.size, Image.Transform.AFFINE, matrix, resample=Image.Resampling.BILINEAR)

    def enhance(kind: Any, brightening: bool = False) -> Callable[[Any, float, Any], Any]:
        def op(image: Any, severity: float, rng: Any) -> Any:
            factor = symmetric(rng, severity)
            return kind(image).enhance(0.75 * factor if brightening and factor > 1 else factor)

        return op

    def shift(image: Any, severity: float, rng: Any, axis: int) -> Any:
        pixels = signed(rng, int(level(rng, severity) * (image.size[axis] / 3) / 10))
        return affine(image, (1, 0, pixels, 0, 1, 0) if axis == 0 else (1, 0, 0, 0, 1, pixels))

    return {
        "autocontrast": lambda image, severity, rng: ImageOps.autocontrast(image),
        "equalize": lambda image, severity, rng: ImageOps.equalize(image),
        "posterize": lambda image, severity, rng: ImageOps.posterize(image, 4 - int(level(rng, severity) * 4 / 10)),
        "rotate": lambda image, severity, rng: image.rotate(
            signed(rng, int(level(rng, severity) * 30 / 10)), resample=Image.Resampling.BILINEAR
        ),
        "solarize": lambda image, severity, rng: ImageOps.solarize(image, 256 - int(level(rng, severity) * 256 / 10)),
        "shear_x": lambda image, severity, rng: affine(
            image, (1, signed(rng, level(rng, severity) * 0.03), 0, 0, 1, 0)
        ),
        "shear_y": lambda image, severity, rng: affine(
            image, (1, 0, 0, signed(rng, level(rng, severity) * 0.03), 1, 0)
        ),
        "translate_x": lambda image, severity, rng: shift(image, severity, rng, 0),
        "translate_y": lambda image, severity, rng: shift(image, severity, rng, 1),
        "color": enhance(ImageEnhance.Color),
        "contrast": enhance(ImageEnhance.Contrast),
        "brightness": enhance(ImageEnhance.Brightness, brightening=True),
        "sharpness": enhance(ImageEnhance.Sharpness),
    }


def pil_per_image(method: str) -> Callable[[torch.Tensor, Any], torch.Tensor] | None:
    """Composer's per-image `method` ('randaugment': severity 9, depth 2; 'augmix': severity 3, random
    depth 1-3, width 3, alpha 1) over a uint8 NCHW batch, image by image through PIL; None without
    Pillow or NumPy."""
    try:
        import numpy as np
        from PIL import Image
    except ImportError:
        return None
    operations = list(_pil_operations().values())

    def chain(image: Any, severity: float, depth: int, rng: Any) -> Any:
        for _ in range(depth):
            image = operations[rng.randint(len(operations))](image, severity, rng)
        return image

    def randaugment(image: Any, rng: Any) -> Any:
        return chain(image, 9, 2, rng)

    def augmix(image: Any, rng: Any, width: int = 3, alpha: float = 1.0) -> Any:
        weights = rng.dirichlet([alpha] * width).astype(np.float32)
        mixing = np.float32(rng.beta(alpha, alpha))
        mixture = np.zeros_like(image, dtype=np.float32)
        for weight in weights:
            mixture += weight * np.asarray(chain(image.copy(), 3, rng.randint(1, 4), rng))
        return Image.fromarray(np.uint8((1 - mixing) * np.asarray(image) + mixing * mixture))

    function = {"randaugment": randaugment, "augmix": augmix}[method]

    def run(images: torch.Tensor, rng: Any) -> torch.Tensor:
        out = [function(Image.fromarray(image.permute(1, 2, 0).numpy()), rng) for image in images]
        return torch.stack([torch.from_numpy(np.array(image)).permute(2, 0, 1) for image in out])

    return run


# Timing -----------------------------------------------------------------------------------------


def _function(name: str) -> Callable[..., Any] | None:
    try:
        return getattr(cf, name)
    except AttributeError:
        return None


def _median_ms(calls: dict[str, Callable[[], Any]], repeats: int, clock: str = "wall") -> dict[str, float]:
    """Warm each call up once, then time them interleaved; the median of each, in milliseconds."""
    now = time.thread_time if clock == "cpu" else time.perf_counter
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = now()
            call()
            times[name].append(now() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def _images(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(tuple(shape), generator=generator)
    return (images * 255).round().to(torch.uint8) if dtype == torch.uint8 else images


def _each(function: Callable[..., Any], images: torch.Tensor, generator: torch.Generator) -> list[Any]:
    """The own loop: `function` on one image after another, drawing from `generator`."""
    return [function(image, generator=generator) for image in images]


def _batched_and_pil(
    batched: Callable[..., Any],
    pil: Callable[[torch.Tensor, Any], torch.Tensor] | None,
    images: torch.Tensor,
    generator: torch.Generator,
) -> dict[str, Callable[[], Any]]:
    """The timed calls on `images`: the batched function (drawing from `generator`) and, with Pillow and
    NumPy, the PIL per-image path (NumPy's legacy RNG, seeded 0)."""
    calls: dict[str, Callable[[], Any]] = {"batched": lambda: batched(images, generator=generator)}
    if pil is not None:
        import numpy as np

        rng = np.random.RandomState(0)
        calls["pil"] = lambda: pil(images, rng)
    return calls


def batched_vs_per_image(
    repeats: int = REPEATS, shapes: Sequence[Sequence[int]] = SHAPES, clock: str = "wall"
) -> list[tuple[str, str, float | None, float | None, float | None]]:
    """(method, shape, PIL per-image ms, own loop ms, batched ms) rows; None where a part is missing."""
    rows: list[tuple[str, str, float | None, float | None, float | None]] = []
    for method in ("randaugment", "augmix"):
        per_image, batched = _function(f"{method}_image"), _function(f"{method}_batch")
        pil = pil_per_image(method)
        for shape in shapes:
            label = "x".join(map(str, shape))
            if per_image is None or batched is None:
                rows.append((method, label, None, None, None))
                continue
            images = _images(shape, torch.uint8)
            generator = torch.Generator().manual_seed(0)
            calls: dict[str, Callable[[], Any]] = {
                "loop": partial(_each, per_image, images, generator),
                **_batched_and_pil(batched, pil, images, generator),
            }
            timings = _median_ms(calls, repeats, clock)
            rows.append((method, label, timings.get("pil"), timings["loop"], timings["batched"]))
    return rows


def method_costs(repeats: int = REPEATS, clock: str = "wall") -> list[tuple[str, float | None]]:
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
        rows.append((name, _median_ms({name: partial(call, function)}, repeats, clock)[name]))
    return rows


def _line(sizes: Sequence[int], costs: Sequence[float]) -> tuple[float, float]:
    """Least-squares (per-call cost, per-sample cost) of costs measured at batch sizes `sizes`."""
    slope, intercept = statistics.linear_regression(sizes, costs)
    return intercept, slope


def cost_lines(
    repeats: int = REPEATS,
    sizes: Sequence[int] = SCALING_SIZES,
    image: Sequence[int] = SCALING_IMAGE,
    clock: str = "wall",
) -> list[tuple[str, tuple[float, float], tuple[float, float] | None]]:
    """(method, batched (ms per call, µs per sample), PIL per-image likewise or None) from a line through
    the costs at batch sizes `sizes`. The per-sample parts bound what batching can buy: however large
    the batch, the batched path beats PIL by at most their ratio."""
    lines = []
    for method in ("randaugment", "augmix"):
        batched, pil = _function(f"{method}_batch"), pil_per_image(method)
        if batched is None:
            continue
        costs: dict[str, list[float]] = {"batched": [], "pil": []}
        for n in sizes:
            calls = _batched_and_pil(batched, pil, _images((n, *image), torch.uint8), torch.Generator().manual_seed(0))
            for name, cost in _median_ms(calls, repeats, clock).items():
                costs[name].append(cost)
        fixed, per_sample = _line(sizes, costs["batched"])
        pil_line = _line(sizes, costs["pil"]) if costs["pil"] else None
        lines.append((method, (fixed, per_sample * 1e3), pil_line and (pil_line[0], pil_line[1] * 1e3)))
    return lines


def print_cost_lines(
    lines: list[tuple[str, tuple[float, float], tuple[float, float] | None]], sizes: Sequence[int]
) -> None:
    shape = "x".join(map(str, SCALING_IMAGE))
    print(f"\nwhere the batched time goes, {shape} uint8 (a line through N = {', '.join(map(str, sizes))}):")
    for method, (fixed, per_sample), pil in lines:
        text = f"{method:<12} batched {fixed:5.2f} ms per call + {per_sample:6.1f} µs per sample"
        if per_sample <= 0:
            text += " (the per-sample cost is below this run's noise: take more repeats or larger batches)"
        elif pil is not None:
            text += f"; PIL {pil[1]:6.1f} µs per sample: at most {pil[1] / per_sample:.1f}x at any batch size"
        print(text)


def _target(shape: str, pil: float | None, loop: float, batched: float) -> str:
    """The target this row is held to, and whether it is met."""
    for (target_shape, ratio), reference, name in ((PIL_TARGET, pil, "PIL"), (LOOP_TARGET, loop, "loop")):
        if shape == "x".join(map(str, target_shape)) and reference is not None:
            met = reference / batched >= ratio
            return f">= {ratio:g}x vs {name}: {'PASS' if met else 'FAIL'}"
    return "-"


def print_table(rows: list[tuple[str, str, float | None, float | None, float | None]]) -> None:
    header = f"{'method':<12} {'uint8 batch':<15} {'PIL per-image':>14} {'own loop':>11} {'batched':>10}"
    print(f"{header} {'vs PIL':>7} {'vs loop':>8}  target")
    for method, shape, pil, loop, batched in rows:
        if loop is None or batched is None:
            print(f"{method:<12} {shape:<15} {'not installed':>14}")
            continue
        pil_ms = f"{pil:11.2f} ms" if pil is not None else f"{'no PIL/NumPy':>14}"
        vs_pil = f"{pil / batched:6.1f}x" if pil is not None else f"{'-':>7}"
        print(
            f"{method:<12} {shape:<15} {pil_ms} {loop:8.2f} ms {batched:7.2f} ms {vs_pil} {loop / batched:7.1f}x  "
            f"{_target(shape, pil, loop, batched)}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cadence_harness.benchmarks.augment", description=__doc__)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args([] if argv is None else argv)
    torch.set_num_threads(1)
    clock = "thread CPU time" if args.clock == "cpu" else "wall clock"
    print(f"CPU: {cpu_description()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread; {clock}, median of {args.repeats} ", end="")
    print("interleaved repeats after a warm-up\n")
    print_table(batched_vs_per_image(args.repeats, clock=args.clock))
    print_cost_lines(cost_lines(args.repeats, clock=args.clock), SCALING_SIZES)
    print(f"\nper-batch cost on {'x'.join(map(str, METHOD_SHAPE))} float32 images")
    for name, cost in method_costs(args.repeats, args.clock):
        print(f"{name:<14} {'not installed' if cost is None else f'{cost:.3f} ms':>14}")


if __name__ == "__main__":
    main(sys.argv[1:])
