"""``cadence-bench grid RECIPE --estimate``: what a grid will cost, before anything runs.

FLOPs are counted, not guessed: one training batch of the recipe's data through the baseline
model (forward, loss and backward under ``FlopCounterMode``), times the batches of every run; one
evaluation batch likewise, times every run's evaluations. The hours are those FLOPs at a throughput
measured here on a few training batches of the baseline (the whole step: loader, augmentation,
forward, backward, optimizer), or at ``--rate`` GFLOP/s. A method that adds work the baseline
does not do (augmentation on the CPU, a scoring forward, a second pass) costs more, so for grids
with such arms the estimate is a floor.

With the study's run records (`records_dir`) holding baseline runs on the device the grid will run
on (this machine's GPU or CPU; for a GPU recipe estimated without a GPU, the GPU its records used
most), the time comes from them instead (`cadence_harness.running.reference`): the baseline's training rate
there, its seconds per evaluation, the rest of its ``fit``, the start-up between runs, and for each
configuration that already ran there, its own costs. The output names the source it used.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from cadence.time import Time, TimeUnit
from cadence_harness.records import latest_per_config, machine_name, read_records, records_file
from cadence_harness.running.budgets import cycles_of
from cadence_harness.running.recipe import OPTIMIZERS, Recipe
from cadence_harness.running.reference import Costs, Reference, reference_from_records
from cadence_harness.running.runspec import RunSpec

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
    reference: Reference | None = None  # the study's own records on the device, when they have its baseline
    records: str = ""  # the records file read, if any
    planned: Costs | None = None  # with a reference: the whole grid's seconds, summed over its runs
    own_costs: int = 0  # runs priced by their configuration's own recorded runs
    recorded: list[bool] = field(default_factory=list)  # per run: already in the records (a grid skips it)
    left: Costs | None = None  # with a reference: the seconds of the runs not recorded yet
    unused: str = ""  # why the study's records gave no reference, when they exist

    def __str__(self) -> str:
        lines = [
            f"estimate for {self.runs} runs:",
            f"  training: {self.train_batches:,} batches, {self.train_flops:.3e} FLOPs "
            "(the baseline's FLOPs per batch; arms whose methods add work cost more)",
            f"  evaluation: {self.evaluations:,} evaluations, {self.eval_flops:.3e} FLOPs",
        ]
        done = sum(self.recorded)
        if self.reference is not None and self.planned is not None:
            return "\n".join(lines + self._from_reference(self.reference, self.planned, done))
        if self.rate is None:
            lines.append(
                "  hours: give --rate GFLOP/s, or run the baseline there first so the study's records give its rate "
                "(the recipe runs on a GPU; this machine cannot measure it)"
            )
            return "\n".join(lines + self._recorded(done))
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
        lines.append(
            "  not counted: per-run start-up, warm-up and the evaluation beyond its FLOPs; each second of them per "
            f"run adds {self.runs / 60:.1f} minutes"
        )
        return "\n".join(lines + self._recorded(done))

    def _recorded(self, done: int) -> list[str]:
        if not self.records:
            return []
        lines = [f"  recorded already in {self.records}: {done} of {self.runs} runs (a grid skips them)"]
        return lines + ([f"  not timed from the records: {self.unused}"] if self.unused else [])

    def _from_reference(self, reference: Reference, planned: Costs, done: int) -> list[str]:
        startup = (reference.startup_s or 0.0) * self.runs
        total = planned.total + startup
        parts = [
            f"training {_length(planned.train_s)}",
            f"evaluation {_length(planned.eval_s)}",
            f"warm-up and the rest of fit {_length(planned.other_s)}",
            f"start-up {_length(startup)}" if reference.startup_s is not None else "start-up not counted",
        ]
        lines = [
            f"  time from the study's records ({self.records}): {reference.describe()}",
            f"  about {_length(total)} on {reference.device}, one run at a time: {', '.join(parts)}; "
            f"{self.own_costs} runs priced by their configuration's own recorded runs, {self.runs - self.own_costs} "
            "at the baseline's rate (a floor for methods that add work)",
        ]
        if done and self.left is not None:
            left = self.left.total + (reference.startup_s or 0.0) * (self.runs - done)
            lines.append(
                f"  recorded already: {done} of {self.runs} runs (a grid skips them); left: about {_length(left)}"
            )
        return lines


def _length(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes" if seconds >= 60 else f"{seconds:.0f} s"


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
    records_dir: str | Path | None = None,
    machine: str | None = None,
) -> Estimate:
    """The FLOPs of `specs` (this shard of the grid of `recipe`) and the hours: at `rate` GFLOP/s when given, else
    from the study's records in `records_dir` when they hold its baseline on the device, else measured here.

    `machine` (`records.machine_name`): a configuration counts as recorded only where its newest record ran on it,
    as ``grid --rerun-elsewhere`` runs the others again."""
    from cadence_harness.running.preflight import sample_batch
    from cadence_harness.running.run import build_data, build_model

    cpu = torch.device("cpu")
    data = build_data(recipe, recipe.seeds[0], cpu, data_dir, download)
    model = build_model(recipe, data)
    model.train()
    per_batch = _flops(lambda: _train_step(model, sample_batch(data.train, data.eval, cpu), None))
    model.eval()
    with torch.no_grad():
        per_eval = _eval_flops(model, data.eval)
    per_epoch = len(data.train)
    batches = [_batches(spec.recipe.duration, per_epoch) for spec in specs]
    evals = sum(evaluations(spec.recipe, per_epoch, total) for spec, total in zip(specs, batches))
    measured_rate = cpu_rate = None
    records = _study_records(records_dir, recipe)
    reference, device = None, _device_here(recipe)
    if rate is None and records:
        reference = reference_from_records(
            records,
            experiment=recipe.name,
            families={spec.family_hash for spec in specs},
            like={"model": recipe.model, "data": recipe.data, "batch_size": str(recipe.batch_size)}
            | {"precision": recipe.resolved_precision},
            device=device,
        )
    if rate is None and reference is None and recipe.device == "cpu":
        measured_rate, cpu_rate = _measure(recipe, model, data.train, per_batch)
    known = {r.config_hash for r in latest_per_config(records) if machine is None or machine_name(r.params) == machine}
    estimate = Estimate(
        runs=len(specs),
        train_batches=sum(batches),
        evaluations=evals,
        train_flops=float(per_batch * sum(batches)),
        eval_flops=float(per_eval * evals),
        rate=rate * 1e9 if rate is not None else measured_rate,
        cpu_rate=cpu_rate,
        threads=torch.get_num_threads(),
        records=str(records_file(records_dir, recipe.name)) if records_dir is not None else "",
        recorded=[spec.config_hash in known for spec in specs],
    )
    if reference is not None:
        _plan(estimate, reference, specs, [per_batch * b for b in batches], per_epoch)
    elif records and rate is None:
        where = device or "any GPU (this machine has none)"
        estimate.unused = f"they hold no finished baseline run of this model, data, batch size and precision on {where}"
    return estimate


def _shapes(batch: Any) -> Any:
    """A batch's structure with each tensor replaced by its shape and dtype (batches alike in it cost alike)."""
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape), batch.dtype)
    if isinstance(batch, dict):
        return tuple((key, _shapes(value)) for key, value in sorted(batch.items()))
    if isinstance(batch, (list, tuple)):
        return tuple(_shapes(item) for item in batch)
    return type(batch).__name__


def _eval_flops(model: Any, loader: Any) -> int:
    """The FLOPs of one pass over the evaluation set: each distinct batch shape counted once, times how often it
    comes (a large evaluation set with test-time augmentation would otherwise take minutes on a CPU)."""
    first: dict[Any, Any] = {}
    seen: Counter[Any] = Counter()
    for batch in loader:
        key = _shapes(batch)
        first.setdefault(key, batch)
        seen[key] += 1
    return sum(_flops(lambda b=batch: model(b)) * seen[key] for key, batch in first.items())


def _study_records(records_dir: str | Path | None, recipe: Recipe) -> list[Any]:
    if records_dir is None or not records_file(records_dir, recipe.name).is_file():
        return []
    return read_records([records_file(records_dir, recipe.name)])


def _device_here(recipe: Recipe) -> str | None:
    """The name a run of `recipe` here would record as its device (None: a GPU recipe on a machine without one)."""
    if recipe.device == "gpu":
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    from cadence_harness.running.run import environment

    return environment(torch.device("cpu"))["device_name"]


def _plan(estimate: Estimate, reference: Reference, specs: Sequence[RunSpec], flops: list[int], per_epoch: int) -> None:
    """Price every run from `reference`: the whole grid (`planned`) and the runs not recorded yet (`left`)."""
    totals, left = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    for spec, train_flops, done in zip(specs, flops, estimate.recorded):
        evaluations_ = evaluations(spec.recipe, per_epoch, _batches(spec.recipe.duration, per_epoch))
        costs, own = reference.costs(spec.group_hash, float(train_flops), evaluations_)
        estimate.own_costs += own
        for i, value in enumerate((costs.train_s, costs.eval_s, costs.other_s)):
            totals[i] += value
            left[i] += 0.0 if done else value
    estimate.reference, estimate.planned, estimate.left = reference, Costs(*totals), Costs(*left)


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
