"""Trainer overhead: cadence's Trainer against a hand-written PyTorch loop, side by side.

The same tiny MLP, data, optimizer and 2,000 batches of 32 on the CPU with one thread; the variants
run interleaved, several times, and the median of each is reported with its cost per batch over the
hand-written loop. Besides the plain Trainer: 10 idle methods (declared on a per-batch event, their
``match`` says no, as a method outside its active window does) and 10 no-op methods matched on every
event (``apply`` runs 13 times per batch each: the worst case for dispatch). Issue 13's target:
<= 1.05x and <= 50 us per batch. Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.overhead [--batches 2000] [--repeats 5] [--clock wall|cpu]

``--clock cpu`` times with the thread's CPU time: on a machine that other jobs share, it leaves out
the time the benchmark waits for a core (everything here runs on one thread).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Classifier, Event, Trainer
from cadence.testing import NoOpAlgorithm
from cadence_harness.benchmarks.machine import cpu_description

IN_FEATURES, HIDDEN, CLASSES, BATCH = 256, 256, 10, 32
TARGET_RATIO, TARGET_US = 1.05, 50.0
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


class IdleAlgorithm(Algorithm):
    """Declared on a per-batch event, never active: what a method outside its window costs."""

    events = (Event.AFTER_DATALOADER,)

    def match(self, event: Event, state: object) -> bool:
        return False

    def apply(self, event: Event, state: object, logger: object) -> None:
        return None


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
    )


def _loader(batches: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * BATCH, IN_FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (batches * BATCH,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)


def raw_loop(batches: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The loop everyone writes by hand; returns seconds for the training loop alone."""
    model, loader = _mlp(), _loader(batches)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    start = clock()
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return clock() - start


def cadence_trainer(
    batches: int, methods: Callable[[], list[Algorithm]] = list, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The same run through cadence.Trainer; returns seconds for fit() alone (setup excluded)."""
    model = Classifier(_mlp(), num_classes=CLASSES)
    trainer = Trainer(
        model=model,
        train_dataloader=_loader(batches),
        max_duration=f"{batches}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        algorithms=methods(),
        device="cpu",
        seed=0,
        progress_bar=False,
    )
    start = clock()
    trainer.fit()
    return clock() - start


def measure(batches: int = 2000, repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    variants: dict[str, Callable[[], float]] = {
        "raw PyTorch loop": lambda: raw_loop(batches, clock),
        "cadence Trainer": lambda: cadence_trainer(batches, clock=clock),
        "+ 10 idle methods": lambda: cadence_trainer(batches, lambda: [IdleAlgorithm() for _ in range(10)], clock),
        "+ 10 no-op methods on every event": lambda: cadence_trainer(
            batches, lambda: [NoOpAlgorithm() for _ in range(10)], clock
        ),
    }
    for run in variants.values():  # warm-up: first-call allocations and lazy imports
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved, so drift in machine load hits every variant alike
        for name, run in variants.items():
            times[name].append(run())
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    medians = measure(args.batches, args.repeats, CLOCKS[args.clock])
    raw = medians["raw PyTorch loop"]
    print(
        f"Trainer overhead: MLP {IN_FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, {args.batches} batches of {BATCH}, "
        f"CPU, 1 thread, {args.clock} clock, median of {args.repeats} interleaved runs (torch {torch.__version__})"
    )
    print(cpu_description())
    print(f"{'variant':<36} {'seconds':>8} {'ms/batch':>9} {'vs raw':>7} {'us/batch over raw':>18}  target")
    for name, seconds in medians.items():
        extra_us = 1e6 * (seconds - raw) / args.batches
        verdict = "" if name == "raw PyTorch loop" else _verdict(seconds / raw, extra_us)
        print(
            f"{name:<36} {seconds:8.3f} {1000 * seconds / args.batches:9.3f} {seconds / raw:6.3f}x "
            f"{extra_us:18.1f}  {verdict}"
        )


def _verdict(ratio: float, extra_us: float) -> str:
    passed = ratio <= TARGET_RATIO or extra_us <= TARGET_US
    return f"<= {TARGET_RATIO}x or <= {TARGET_US:.0f} us: {'PASS' if passed else 'FAIL'}"


if __name__ == "__main__":
    main()
