"""Trainer overhead: cadence's Trainer against a hand-written PyTorch loop, side by side.

Two setups, each on the CPU with one thread: ``mlp`` (issue 13's figure) trains a tiny MLP on 2,000
batches of 32 from a DataLoader; ``bare`` trains Linear(4, 2) on 4,000 batches of 2 from a list, so
that the step itself costs almost nothing and what remains is the per-batch cost of the loop (the
difference between the two loops is far less noisy there than on top of the MLP's millisecond). The
variants run interleaved, several times, and the median of each is reported with its cost per batch
over the hand-written loop. Besides the plain Trainer: 10 idle methods (declared on a per-batch event,
their ``match`` says no, as a method outside its active window does) and 10 no-op methods matched on
every event (``apply`` runs 13 times per batch each: the worst case for dispatch). Issue 13's target:
<= 1.05x or <= 50 us per batch. Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.overhead [--batches 2000] [--repeats 5] [--clock wall|cpu]
                                                  [--setups mlp,bare]

``--clock cpu`` times with the thread's CPU time: on a machine that other jobs share, it leaves out
the time the benchmark waits for a core (everything here runs on one thread).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Classifier, Event, Trainer
from cadence.testing import NoOpAlgorithm
from cadence_harness.benchmarks.machine import cpu_description

IN_FEATURES, HIDDEN, CLASSES = 256, 256, 10
TARGET_RATIO, TARGET_US = 1.05, 50.0
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


class IdleAlgorithm(Algorithm):
    """Declared on a per-batch event, never active: what a method outside its window costs."""

    events = (Event.AFTER_DATALOADER,)

    def match(self, event: Event, state: object) -> bool:
        return False

    def apply(self, event: Event, state: object, logger: object) -> None:
        return None


@dataclass(frozen=True)
class Setup:
    """A model, its data and how many batches of what size: the same for both loops."""

    title: str
    model: Callable[[], nn.Module]
    data: Callable[[int, int], Iterable[Any]]  # (batches, batch size) -> batches of (inputs, targets)
    batch_size: int
    classes: int
    batches_scale: int = 1  # times --batches (the bare step is so short that it takes more to measure)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
    )


def _tensors(batches: int, batch_size: int, features: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch_size, features, generator=generator)
    return x, torch.randint(0, classes, (batches * batch_size,), generator=generator)


def _loader(batches: int, batch_size: int) -> DataLoader:
    return DataLoader(TensorDataset(*_tensors(batches, batch_size, IN_FEATURES, CLASSES)), batch_size, shuffle=True)


def _bare_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 2)


def _batch_list(batches: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = _tensors(batches, batch_size, 4, 2)
    return list(zip(x.split(batch_size), y.split(batch_size)))


_MLP_TITLE = f"MLP {IN_FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES} from a shuffling DataLoader"
SETUPS = {
    "mlp": Setup(_MLP_TITLE, _mlp, _loader, 32, CLASSES),
    "bare": Setup("Linear(4, 2) from a list of batches (the loop's own cost)", _bare_model, _batch_list, 2, 2, 2),
}


def raw_loop(batches: int, clock: Callable[[], float] = time.perf_counter, setup: Setup = SETUPS["mlp"]) -> float:
    """The loop everyone writes by hand; returns seconds for the training loop alone."""
    model, loader = setup.model(), setup.data(batches, setup.batch_size)
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
    batches: int,
    methods: Callable[[], list[Algorithm]] = list,
    clock: Callable[[], float] = time.perf_counter,
    setup: Setup = SETUPS["mlp"],
) -> float:
    """The same run through cadence.Trainer; returns seconds for fit() alone (setup excluded)."""
    model = Classifier(setup.model(), num_classes=setup.classes)
    trainer = Trainer(
        model=model,
        train_dataloader=setup.data(batches, setup.batch_size),
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


def measure(
    batches: int = 2000, repeats: int = 5, clock: Callable[[], float] = time.perf_counter, setup: Setup = SETUPS["mlp"]
) -> dict[str, float]:
    variants: dict[str, Callable[[], float]] = {
        "raw PyTorch loop": lambda: raw_loop(batches, clock, setup),
        "cadence Trainer": lambda: cadence_trainer(batches, clock=clock, setup=setup),
        "+ 10 idle methods": lambda: cadence_trainer(
            batches, lambda: [IdleAlgorithm() for _ in range(10)], clock, setup
        ),
        "+ 10 no-op methods on every event": lambda: cadence_trainer(
            batches, lambda: [NoOpAlgorithm() for _ in range(10)], clock, setup
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
    parser.add_argument("--setups", default="mlp,bare", help=f"comma-separated, of {', '.join(SETUPS)}")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.setups.split(",") if name.strip()]
    unknown = [name for name in names if name not in SETUPS]
    if unknown or not names:
        parser.error(f"--setups {args.setups!r}: unknown {unknown}; choose from {', '.join(SETUPS)}")
    torch.set_num_threads(1)
    print(f"Trainer overhead: CPU, 1 thread, {args.clock} clock, median of {args.repeats} interleaved runs")
    print(f"{cpu_description()}; torch {torch.__version__}")
    for name in names:
        setup = SETUPS[name]
        batches = args.batches * setup.batches_scale
        medians = measure(batches, args.repeats, CLOCKS[args.clock], setup)
        raw = medians["raw PyTorch loop"]
        print(f"\n{name}: {setup.title}, {batches} batches of {setup.batch_size}")
        print(f"{'variant':<36} {'seconds':>8} {'ms/batch':>9} {'vs raw':>7} {'us/batch over raw':>18}  target")
        for variant, seconds in medians.items():
            extra_us = 1e6 * (seconds - raw) / batches
            verdict = "" if variant == "raw PyTorch loop" else _verdict(seconds / raw, extra_us)
            print(
                f"{variant:<36} {seconds:8.3f} {1000 * seconds / batches:9.3f} {seconds / raw:6.3f}x "
                f"{extra_us:18.1f}  {verdict}"
            )


def _verdict(ratio: float, extra_us: float) -> str:
    passed = ratio <= TARGET_RATIO or extra_us <= TARGET_US
    return f"<= {TARGET_RATIO}x or <= {TARGET_US:.0f} us: {'PASS' if passed else 'FAIL'}"


if __name__ == "__main__":
    main()
