"""The compiled training step: ``Trainer(compile_config={})`` against the eager Trainer, side by side.

torchvision ResNet-18 (10 classes) on 32x32 images, batches of 32, SGD, on the CPU (or the GPU with
``--device gpu``). Two trainers with the same weights and data train in alternating rounds of a few
batches (``fit(duration=...)``), so machine drift falls on both alike; every batch is timed from
BATCH_START to BATCH_END. The compiled trainer's first round (Inductor's compile) is reported on its
own line, then the median step of the later rounds and the ratio. Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.compiled [--rounds 6] [--batches-per-round 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn

from cadence import Callback, Classifier, Event, Trainer
from cadence_harness.benchmarks.machine import cpu_description

BATCH, IMAGE, CLASSES = 32, 32, 10


class StepTimer(Callback):
    """Seconds of every training batch, BATCH_START to BATCH_END (synchronising the GPU at both ends)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def run_event(self, event: Event, state: Any, logger: Any) -> None:
        if event in (Event.BATCH_START, Event.BATCH_END):
            if state.device.type == "cuda":
                torch.cuda.synchronize(state.device)
            now = time.perf_counter()
            if event is Event.BATCH_START:
                self._start = now
            else:
                self.seconds.append(now - self._start)


def _resnet18() -> nn.Module:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    return resnet18(num_classes=CLASSES)


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(count, BATCH, 3, IMAGE, IMAGE, generator=generator)
    labels = torch.randint(0, CLASSES, (count, BATCH), generator=generator)
    return list(zip(images, labels, strict=True))


def _trainer(batches: list[Any], device: str, compile_config: dict[str, Any] | None) -> tuple[Trainer, StepTimer]:
    model = Classifier(_resnet18(), num_classes=CLASSES)
    timer = StepTimer()
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        callbacks=[timer],
        device=device,
        precision="fp32",
        seed=0,
        progress_bar=False,
        compile_config=compile_config,
    )
    return trainer, timer


def measure(
    rounds: int = 6, batches_per_round: int = 5, device: str = "cpu", compile_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Compile seconds, graphs, and per-variant median step seconds over rounds 2..`rounds`
    (`compile_config`: torch.compile's arguments, default ``{}``: Inductor)."""
    batches = _batches(batches_per_round)
    eager, eager_timer = _trainer(batches, device, None)
    compiled, compiled_timer = _trainer(batches, device, compile_config or {})
    first_round = 0.0
    for index in range(rounds):
        for trainer in (eager, compiled):
            trainer.fit(duration=f"{batches_per_round}ba")
        if index == 0:
            first_round = sum(compiled_timer.seconds)
            eager_timer.seconds.clear()
            compiled_timer.seconds.clear()
    assert compiled.compiled is not None
    return {
        "compile_s": first_round,
        "graphs": int(compiled.compiled.report()["trainer/compiled_graphs"]),
        "eager": statistics.median(eager_timer.seconds),
        "compiled": statistics.median(compiled_timer.seconds),
        "steps": len(eager_timer.seconds),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches-per-round", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args(argv)
    result = measure(args.rounds, args.batches_per_round, args.device)
    print(
        f"compiled step: torchvision ResNet-18, {BATCH}x3x{IMAGE}x{IMAGE}, SGD, {args.device}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}\n{cpu_description()}"
    )
    print(f"first round with compile ({args.batches_per_round} batches): {result['compile_s']:.1f} s, "
          f"{result['graphs']} graph(s) compiled")  # fmt: skip
    print(f"median step over {result['steps']} batches each, interleaved rounds:")
    print(f"  eager    {1000 * result['eager']:8.1f} ms")
    print(f"  compiled {1000 * result['compiled']:8.1f} ms   speed-up {result['eager'] / result['compiled']:.2f}x")


if __name__ == "__main__":
    main()
