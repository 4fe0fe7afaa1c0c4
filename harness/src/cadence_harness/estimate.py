"""``cadence-bench grid RECIPE --estimate``: what a grid will cost, before anything runs.

FLOPs are counted, not guessed: one training batch of the recipe's data through the baseline
model (forward, loss and backward under ``FlopCounterMode``), times the batches of every run; one
evaluation batch likewise, times every run's evaluations. The hours are those FLOPs at a throughput
measured here on a few training batches of the baseline (the whole step: loader, augmentation,
forward, backward, optimizer), or at ``--rate`` GFLOP/s. A method that adds work the baseline
does not do (augmentation on the CPU, a scoring forward, a second pass) costs more, so for grids
with such arms the estimate is a floor; the grid's records give the real costs after its first seed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from cadence.time import Time, TimeUnit
from cadence_harness.budgets import cycles_of
from cadence_harness.recipe import OPTIMIZERS, Recipe
from cadence_harness.runspec import RunSpec

__all__ = ["Estimate", "estimate_grid", "evaluations"]

MEASURED_BATCHES = 3


@dataclass
class Estimate:
    runs: int
    train_batches: int
    evaluations: int
    train_flops: float
    eval_flops: float
    rate: float | None  # FLOP/s of wall-clock, None when it could not be measured (a GPU recipe on a CPU)
    cpu_rate: float | None  # FLOP per second of process CPU time, when measured
    threads: int

    def __str__(self) -> str:
        lines = [
            f"estimate for {self.runs} runs:",
            f"  training: {self.train_batches:,} batches, {self.train_flops:.3e} FLOPs "
            "(the baseline's FLOPs per batch; arms whose methods add work cost more)",
            f"  evaluation: {self.evaluations:,} evaluations, {self.eval_flops:.3e} FLOPs",
        ]
        if self.rate is None:
            lines.append("  hours: give --rate GFLOP/s (the recipe runs on a GPU; this machine cannot measure it)")
            return "\n".join(lines)
        if self.cpu_rate is not None:
            lines.append(
                f"  throughput measured here on {MEASURED_BATCHES} baseline batches: {self.rate / 1e9:.1f} GFLOP/s "
                f"wall-clock ({self.cpu_rate / 1e9:.1f} GFLOP per CPU-second, {self.threads} threads); a busy "
                "machine measures low"
            )
        else:
            lines.append(f"  throughput: {self.rate / 1e9:.1f} GFLOP/s (given with --rate)")
        seconds = (self.train_flops + self.eval_flops) / self.rate
        length = f"{seconds / 3600:.1f} hours" if seconds >= 3600 else f"{seconds / 60:.1f} minutes"
        lines.append(f"  about {length} of training and evaluation at that rate, one run at a time")
        return "\n".join(lines)


def evaluations(recipe: Recipe, per_epoch: int, total: int) -> int:
    """How many evaluations a run of `total` batches makes: every eval_interval, every cycle end, and the last batch."""
    every = Time.from_input(recipe.eval_interval, TimeUnit.EPOCH)
    if every.unit is TimeUnit.EPOCH:
        step = int(every.value) * per_epoch
    elif every.unit is TimeUnit.BATCH:
        step = int(every.value)
    else:
        step = max(round(every.value * total), 1)
    points = set(range(step, total + 1, step)) | {total}
    points |= {_batches(end, per_epoch) for end in cycles_of(recipe)}
    return len(points)


def _batches(duration: str, per_epoch: int) -> int:
    time_ = Time.from_input(duration)
    if time_.unit is TimeUnit.EPOCH:
        return int(time_.value) * per_epoch
    if time_.unit is TimeUnit.BATCH:
        return int(time_.value)
    raise ValueError(f"cannot estimate a run of {duration}: give its duration in ep or ba")


def _train_step(model: Any, batch: Any, optimizer: torch.optim.Optimizer | None) -> None:
    loss = model.loss(model(batch), batch)
    (loss if loss.dim() == 0 else loss.sum()).backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _flops(work: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        work()
    return int(counter.get_total_flops())


def estimate_grid(
    recipe: Recipe,
    specs: Sequence[RunSpec],
    *,
    data_dir: str | None = None,
    download: bool = False,
    rate: float | None = None,
) -> Estimate:
    """The FLOPs of `specs` (this shard of the grid of `recipe`) and the hours at `rate` GFLOP/s or measured here."""
    from cadence_harness.preflight import sample_batch
    from cadence_harness.run import build_data, build_model

    cpu = torch.device("cpu")
    data = build_data(recipe, recipe.seeds[0], cpu, data_dir, download)
    model = build_model(recipe, data)
    model.train()
    per_batch = _flops(lambda: _train_step(model, sample_batch(data.train, data.eval, cpu), None))
    model.eval()
    eval_batches = list(data.eval)
    with torch.no_grad():
        per_eval = sum(_flops(lambda b=b: model(b)) for b in eval_batches)
    per_epoch = len(data.train)
    batches = [_batches(spec.recipe.duration, per_epoch) for spec in specs]
    evals = sum(evaluations(spec.recipe, per_epoch, total) for spec, total in zip(specs, batches))
    measured_rate = cpu_rate = None
    if rate is None and recipe.device == "cpu":
        measured_rate, cpu_rate = _measure(recipe, model, data.train, per_batch)
    return Estimate(
        runs=len(specs),
        train_batches=sum(batches),
        evaluations=evals,
        train_flops=float(per_batch * sum(batches)),
        eval_flops=float(per_eval * evals),
        rate=rate * 1e9 if rate is not None else measured_rate,
        cpu_rate=cpu_rate,
        threads=torch.get_num_threads(),
    )


def _measure(recipe: Recipe, model: Any, loader: Any, per_batch: int) -> tuple[float, float]:
    """FLOP/s of wall-clock and per CPU-second over a few whole training steps (after one untimed step)."""
    model.train()
    kwargs = {k: v for k, v in recipe.optimizer.items() if k != "name"}
    optimizer = OPTIMIZERS[recipe.optimizer["name"]](model.parameters(), **kwargs)
    batches = iter(loader)

    def next_batch() -> Any:
        nonlocal batches
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            batch = next(batches)
        return batch

    _train_step(model, next_batch(), optimizer)
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(MEASURED_BATCHES):
        _train_step(model, next_batch(), optimizer)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return per_batch * MEASURED_BATCHES / wall, per_batch * MEASURED_BATCHES / cpu
