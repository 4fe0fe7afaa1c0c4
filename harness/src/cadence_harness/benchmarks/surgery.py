"""Model-surgery costs: a training step of torchvision ResNet-18 with each installed surgery method, side by side.

Every installed method whose Algorithm derives from `cadence.ops.SurgeryMethod` is found through
`cadence.registry.registry()` (a new package appears here without editing this file) and applied with
its default arguments to a copy of one ResNet-18 (the same weights). The plain model and every variant
then run forward and backward in training mode at 64x3x32x32 and 16x3x224x224, interleaved (one
warm-up, then the median of the repeats), in this one process. A method that needs arguments, fails,
changes nothing on ResNet-18, or refuses a batch size (`check_applicable`: Ghost BatchNorm with one
ghost batch) is listed with the reason. Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.surgery [--repeats 5] [--threads 1] [--clock wall|cpu]

``--clock cpu`` times with the process's CPU time instead of the wall clock: on a machine other jobs
share, it leaves out the time the benchmark waits for a core (meaningful with ``--threads 1``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from cadence import NotApplicableError
from cadence.ops import SurgeryMethod
from cadence.registry import registry
from cadence_harness.benchmarks.machine import cpu_name

SHAPES = ((64, 3, 32, 32), (16, 3, 224, 224))
REPEATS = 5


@dataclass
class Variant:
    """The plain model or one surgery applied to a copy of it (`model` None: `note` says why it is not timed)."""

    name: str
    model: nn.Module | None
    note: str
    algorithm: SurgeryMethod | None = None


def surgery_methods() -> dict[str, type[SurgeryMethod]]:
    """Registry name -> Algorithm class of every installed surgery method."""
    methods = registry().methods.items()
    return {name: info.algorithm for name, info in sorted(methods) if issubclass(info.algorithm, SurgeryMethod)}


def build_variants(plain: nn.Module, methods: dict[str, type[SurgeryMethod]]) -> list[Variant]:
    """The plain model, then a copy of it per method with the method's surgery applied (default arguments)."""
    variants = [Variant("plain", plain, "")]
    for name, algorithm in methods.items():
        model = copy.deepcopy(plain)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                method = algorithm()
                report = method.surgery(model, [])
        except Exception as error:  # a method that needs arguments, or cannot work on this model: a row, not a crash
            variants.append(Variant(name, None, f"not timed: {type(error).__name__}: {error}"[:120]))
            continue
        if not report:
            reason = str(caught[-1].message).split(":")[0] if caught else f"{name} changed nothing"
            variants.append(Variant(name, None, f"not timed: {reason}"))
            continue
        variants.append(Variant(name, model, f"{report.count} modules changed", method))
    return variants


def _step(model: nn.Module, images: torch.Tensor, clock: Callable[[], float]) -> tuple[float, float]:
    """(forward, forward + backward) seconds of one training step."""
    model.zero_grad(set_to_none=True)
    start = clock()
    out = model(images)
    forward = clock()
    out.float().sum().backward()
    return forward - start, clock() - start


def _refusal(variant: Variant, images: torch.Tensor) -> str | None:
    """Why the method refuses batches like `images` (e.g. Ghost BatchNorm on one ghost batch), or None."""
    if variant.algorithm is None:
        return None
    try:
        variant.algorithm.check_applicable(variant.model, (images, torch.zeros(len(images), dtype=torch.long)))
    except NotApplicableError as error:
        return f"not timed at this size: {error}"
    return None


def measure(
    variants: list[Variant], shape: tuple[int, ...], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, tuple[float, float] | str]:
    """Name -> median (forward, forward + backward) seconds on random images of `shape`, interleaved, or the
    reason a method refuses such batches."""
    images = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    refused = {v.name: reason for v in variants if (reason := _refusal(v, images)) is not None}
    timed = [(v.name, v.model) for v in variants if v.model is not None and v.name not in refused]
    for _, model in timed:
        model.train()
        _step(model, images, clock)  # warm-up: first-call allocations, lazy initialisation
    times: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in timed}
    for _ in range(repeats):  # interleaved: drift in machine load hits every variant alike
        for name, model in timed:
            times[name].append(_step(model, images, clock))
    medians = {
        name: (statistics.median(t[0] for t in values), statistics.median(t[1] for t in values))
        for name, values in times.items()
    }
    return {**refused, **medians}


def print_table(variants: list[Variant], shape: tuple[int, ...], medians: dict[str, tuple[float, float] | str]) -> None:
    plain = medians["plain"]
    assert not isinstance(plain, str)  # the plain model has no method to refuse a batch size
    forward_plain, step_plain = plain
    print(f"\nResNet-18, training step on {'x'.join(map(str, shape))} images")
    print(f"{'method':<26} {'forward':>10} {'vs plain':>9} {'fwd+bwd':>10} {'vs plain':>9}  notes")
    for variant in variants:
        timing = medians.get(variant.name, variant.note)
        if isinstance(timing, str):
            print(f"{variant.name:<26} {'':>10} {'':>9} {'':>10} {'':>9}  {timing[:140]}")
            continue
        forward, step = timing
        print(
            f"{variant.name:<26} {forward * 1e3:7.1f} ms {forward / forward_plain:8.3f}x "
            f"{step * 1e3:7.1f} ms {step / step_plain:8.3f}x  {variant.note}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    import torchvision

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    variants = build_variants(torchvision.models.resnet18(), surgery_methods())
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(
        f"torch {torch.__version__}, CPU {cpu_name()} ({args.threads} thread{'s' * (args.threads > 1)}), "
        f"{args.clock} clock; median of {args.repeats} interleaved repeats after a warm-up; each surgery method "
        "with its default arguments"
    )
    for shape in SHAPES:
        print_table(variants, shape, measure(variants, shape, args.repeats, clock))


if __name__ == "__main__":
    main()
