"""Where the harness's host time per step goes: its step phase by phase, beside the same phases of its twin.

`harness_step` times the whole step against a hand-written twin; `step_calls` counts its calls and bytecodes. This
times each phase of the full harness's step (the MLflow logger writing from its child process, as on a CUDA
machine) between the Trainer's events, marked by a callback that runs first on every event, and the same phases
of the twin's step, marked inside it, in the same lockstep run:

* batch: the loader and its augmentation (BEFORE_DATALOADER to AFTER_DATALOADER);
* zero_grad, forward, loss, backward: between the events around each;
* optimizer step: AFTER_TRAIN_BATCH to BATCH_END, with what the Trainer does after the update (the non-finite
  check, the timestamp, schedules, logging);
* between: the rest of the harness's span from the twin's last step to this BATCH_END (the events outside these
  phases, the batch's bookkeeping, the checkpoint event, an evaluation when one falls); the twin's rest is its marks.

Each row is the median over steady steps (an evaluation, once an epoch, does not move it), so the rows do not add
up to the medians of the totals exactly. The evaluation's phases per batch follow, the harness's only (its
hand-written counterpart per batch is `harness_step`'s "pieces alone"). The phases run at the host's speed of the
moment, like every timed row: read them as a map of where a per-step excess sits, not as a verdict.

    python -m cadence_harness.benchmarks.step_phases [--steps 640] [--batch-size 64] [--variant 0-4]

``--variant`` runs one of `harness_step`'s variants instead (0: the Trainer and loader alone ... 4: the full
harness), to see which piece a phase's excess comes with (a callback's work at an event is inside the phase
that event opens).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cadence import Callback, Event
from cadence_harness.benchmarks.harness_step import CHILD, VARIANTS, WARMUP_STEPS, trainer_run
from cadence_harness.benchmarks.machine import cpu_description
from cadence_harness.benchmarks.step_workload import STEPS_PER_EPOCH, Data, HandTwin, MLflowStore, twin_eval_steps

__all__ = ["PHASES", "PhaseMarks", "main", "phase_times"]

Mark = tuple[str, float]
# (row, the harness's marks (events) from and to, the twin's marks from and to)
PHASES = (
    ("batch (loader, augmentation)", ("before_dataloader", "after_dataloader"), ("start", "batch")),
    ("zero_grad", ("batch_start", "before_train_batch"), ("batch", "zeroed")),
    ("forward", ("before_forward", "after_forward"), ("zeroed", "forward")),
    ("loss", ("before_loss", "after_loss"), ("forward", "loss")),
    ("backward", ("before_backward", "after_backward"), ("loss", "backward")),
    ("optimizer step (+ the Trainer's after it)", ("after_train_batch", "batch_end"), ("backward", "stepped")),
)
TWIN_MARKS = frozenset(mark for _, _, twin in PHASES for mark in twin)  # what `MarkedTwin` marks
EVAL_PHASES = (
    ("eval batch: loader, to the device", ("eval_batch_end", "eval_batch_start")),
    ("eval batch: forward", ("eval_before_forward", "eval_after_forward")),
    ("eval batch: metric updates", ("eval_after_forward", "eval_batch_end")),
)


class PhaseMarks(Callback):
    """Appends ``(event name, time)`` at every event; listed first, it marks each event before the others run."""

    def __init__(self, marks: list[Mark], clock: Callable[[], float] = time.perf_counter) -> None:
        self.marks, self.clock = marks, clock

    def handles(self, event: Event) -> bool:
        return True

    def handler(self, event: Event) -> Callable[[Any, Any], None]:
        name, marks, clock = event.value, self.marks, self.clock
        return lambda state, logger: marks.append((name, clock()))


class MarkedTwin(HandTwin):
    """`HandTwin`'s step with a mark between its phases (the same work: see `HandTwin.step`)."""

    def __init__(
        self, data: Data, steps: int, marks: list[Mark], clock: Callable[[], float] = time.perf_counter
    ) -> None:
        super().__init__(data, twin_eval_steps(steps))
        self.marks, self.clock = marks, clock

    def step(self) -> None:
        marks, clock = self.marks, self.clock
        self.evaluate_if_due()  # outside the phases, as the harness's evaluation
        marks.append(("start", clock()))
        images, labels = next(self._batches)
        marks.append(("batch", clock()))
        self.optimizer.zero_grad(set_to_none=True)
        marks.append(("zeroed", clock()))
        logits = self.model(images)
        marks.append(("forward", clock()))
        loss = F.cross_entropy(logits, labels)
        marks.append(("loss", clock()))
        loss.backward()
        marks.append(("backward", clock()))
        self.optimizer.step()
        marks.append(("stepped", clock()))


def _span(marks: list[Mark], start: str, end: str) -> float | None:
    """Seconds from the first `start` mark to the first `end` mark after it; None when either is missing."""
    for i, (name, at) in enumerate(marks):
        if name == start:
            return next((later - at for name2, later in marks[i + 1 :] if name2 == end), None)
    return None


def phase_times(marks: list[Mark]) -> dict[str, list[tuple[float, float]]]:
    """Per row, the (harness, twin) microseconds of every steady step; ``between`` and ``total`` included. The
    marks are one run's, in order: the lockstep clock's ``opened`` (the fit's start, each twin step's end) and
    ``reached`` (BATCH_END) cut them into the harness's spans and the twin's."""
    steps: list[tuple[list[Mark], list[Mark], float, float]] = []  # (harness marks, twin marks, totals)
    harness: list[Mark] = []
    twin: list[Mark] = []
    opened = reached = 0.0
    for name, at in marks:
        if name == "reached":
            reached, twin = at, []
        elif name == "opened":  # the fit's start, then each twin step's end
            if twin:
                steps.append((harness, twin, reached - opened, at - reached))
            harness, opened = [], at
        elif name in TWIN_MARKS:
            twin.append((name, at))
        else:
            harness.append((name, at))
    rows: dict[str, list[tuple[float, float]]] = {row: [] for row, _, _ in PHASES}
    rows["between"], rows["total"] = [], []
    for harness, twin, harness_total, twin_total in steps[WARMUP_STEPS:]:  # as `Lockstep`: from step W on
        spans = [(_span(harness, *ours), _span(twin, *theirs)) for _, ours, theirs in PHASES]
        phases = [(ours, theirs) for ours, theirs in spans if ours is not None and theirs is not None]
        if len(phases) < len(PHASES):
            continue  # not a full step
        for (row, _, _), (ours, theirs) in zip(PHASES, phases):
            rows[row].append((1e6 * ours, 1e6 * theirs))
        rest = (harness_total - sum(ours for ours, _ in phases), twin_total - sum(theirs for _, theirs in phases))
        rows["between"].append((1e6 * rest[0], 1e6 * rest[1]))
        rows["total"].append((1e6 * harness_total, 1e6 * twin_total))
    return rows


def eval_phase_times(marks: list[Mark]) -> dict[str, list[float]]:
    """The harness's microseconds per evaluation batch, by `EVAL_PHASES` (every consecutive pair of marks)."""
    rows: dict[str, list[float]] = {row: [] for row, _ in EVAL_PHASES}
    for (name, at), (next_name, later) in itertools.pairwise(marks):
        for row, pair in EVAL_PHASES:
            if (name, next_name) == pair:
                rows[row].append(1e6 * (later - at))
    return rows


def run(data: Data, steps: int, store: MLflowStore, variant: str = CHILD) -> list[Mark]:
    """One lockstep run of `harness_step`'s `variant` (default: the full harness, the logger's child writing), its
    events and its twin's phases marked."""
    marks: list[Mark] = []
    clock, names = time.perf_counter, itertools.cycle(("opened", "reached"))  # the fit's start, BATCH_END, twin end...

    def now() -> tuple[float, ...]:
        at = clock()
        marks.append((next(names), at))
        return (at,)

    trainer_run(data, steps, VARIANTS.index(variant), store, now=now, first=[PhaseMarks(marks, clock)],
                twin=MarkedTwin(data, steps, marks, clock))  # fmt: skip
    return marks


def main(argv: list[str] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Prints the medians per phase; returns every step's (harness, twin) microseconds per row."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10 * STEPS_PER_EPOCH)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--variant", type=int, choices=range(len(VARIANTS)), default=len(VARIANTS) - 1,
                        help="; ".join(f"{i}: {name}" for i, name in enumerate(VARIANTS)))  # fmt: skip
    args = parser.parse_args(argv)
    variant = VARIANTS[args.variant]
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps {args.steps} must exceed the {WARMUP_STEPS} warm-up steps")
    torch.set_num_threads(1)
    data, store = Data.build(args.batch_size), MLflowStore(torch.device("cpu"))
    try:
        run(data, WARMUP_STEPS + 1, store)  # imports and first builds, every piece
        gc.collect()
        marks = run(data, args.steps, store, variant)
    finally:
        store.close()
    rows = phase_times(marks)
    print(
        f"harness_step's variant {variant!r} by phase beside its hand-written twin's, "
        f"{len(rows['total'])} steady steps of {args.batch_size} images, median us (the host's speed now)"
    )
    print(f"{cpu_description()}; torch {torch.__version__}")
    print(f"{'phase':<44} {'harness':>9} {'twin':>9} {'extra':>8}")
    for row, times in rows.items():
        ours, theirs = statistics.median(o for o, _ in times), statistics.median(t for _, t in times)
        print(f"{row:<44} {ours:9.1f} {theirs:9.1f} {ours - theirs:+8.1f}")
    for row, per_batch in eval_phase_times(marks).items():
        if per_batch:
            print(f"{row:<44} {statistics.median(per_batch):9.1f} {'':>9} {'':>8}  (the harness's, per batch)")
    return rows


if __name__ == "__main__":
    main()
