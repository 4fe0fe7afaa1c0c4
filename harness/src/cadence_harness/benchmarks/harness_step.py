"""Host time per training step outside the model: the harness's own path against a hand-written loop.

An airbench-class CIFAR-10 step takes about 4.5 ms on an H100, where the device works while the host
queues the next step: whatever the host does per step beyond launching the model is what the harness
must keep small. Here, on the CPU with one thread and a near-zero-cost model (``Flatten`` + one
``Linear(3072, 10)`` on 32x32 images), both loops train on the same data in lockstep, in one process:

* ``harness``: what ``cadence-bench run`` runs: `TensorLoader` with the recipe's batched flip and crop,
  the `Trainer` with `RunTimer` and `FlopCounter`, the batched `MLFlowLogger` (to a temporary sqlite
  store) and an evaluation at each epoch's end; and the same Trainer with those pieces added one at a
  time, so the difference splits into what each adds. The logger comes twice: writing its store from a
  thread of this process, and from its child process (`cadence_mlflow.writer`; the default on a CUDA
  machine, a thread elsewhere). The child's CPU is in no column here; the GIL it no longer takes is.
* its ``twin``, a hand-written loop: a permutation per epoch, a gather, flip and crop on the batch (the
  harness's own batch functions), forward, loss, backward, SGD step; an evaluation per epoch, half an epoch
  from the harness's (`step_workload.twin_eval_steps`), that counts correct predictions on the device and
  reads them back once. It takes one step at each of the harness's BATCH_END, so every step of the harness
  run is paired with a twin step a millisecond away: the harness's step is the time from the twin's last
  step to this BATCH_END (everything the Trainer does between two steps: the batch, events, logging,
  evaluation), the twin's is its own step.

A shared 2-CPU machine moves whole runs by hundreds of us per step; paired step by step, both loops
see the same machine, and the run's difference has a spread of tens of us. Each run's steady state is
from step `WARMUP_STEPS` to the last (evaluations included, as they fall in a run); the FLOP-counted
first step is shown apart. Then the pieces alone: an epoch of the loader with its augmentation against the
hand-written slicing, one `log_metrics` call of the per-step metrics, and an evaluation per batch. The A/A row puts
a second twin in the harness's place: it reads the lockstep's own bias. Goal
(issue 27): the harness adds <= 200 us per step, judged by the 95% t-interval of the repeats' differences
(PASS below, FAIL above, INCONCLUSIVE across). The goal exists for a GPU's host thread, so it is judged on
what a CUDA machine runs (the child writes the store) on both the wall clock and the training thread's CPU
time; the thread writer's rows (this CPU-only machine's default) are judged too and printed beside, since
there the writer's MLflow work takes the GIL the training thread waits for (wall clock above its CPU
time). Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.harness_step [--steps 640] [--repeats 5] [--batch-size 64] [--device gpu]

``--device gpu`` runs the same on a CUDA GPU (fp32, as the hand-written loop): with a model this small the
device waits for the host, so the wall clock per step is the host's work per step there.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cadence import Callback, Classifier, Trainer
from cadence_harness.benchmarks.machine import cpu_description
from cadence_harness.benchmarks.paired_goal import goal_text, interval_text, paired_difference
from cadence_harness.benchmarks.step_workload import (
    CLASSES,
    EVAL_BATCH_SIZE,
    EVAL_BATCHES,
    IMAGE_SIZE,
    STEPS_PER_EPOCH,
    Data,
    HandTwin,
    MLflowStore,
    hand_batches,
    hand_eval,
    harness_eval_steps,
    tiny_model,
    twin_eval_steps,
)
from cadence_harness.running import loaders
from cadence_harness.running.flops import FlopCounter
from cadence_harness.running.timing import RunTimer
from cadence_harness.stats import Interval
from cadence_mlflow.writer import writes_out_of_process

GOAL_US = 200.0
WARMUP_STEPS = 8
VARIANTS = (
    "Trainer + loader",
    "+ RunTimer",
    "+ FlopCounter",
    "+ MLFlowLogger, thread writes",  # out_of_process=False: the store written from a thread of this process
    "+ MLFlowLogger, child writes",  # out_of_process=True: written by its child process
)
THREAD, CHILD = VARIANTS[-2:]
CONTROL = "A/A: a hand loop instead"  # the control row: the harness replaced by a second hand-written twin


def harness_variant(uri: str) -> str:
    """The row that runs what cadence-bench runs here: the logger's default writer for this machine's store."""
    return CHILD if writes_out_of_process(None, uri) else THREAD


CLOCKS = {"wall": time.perf_counter, "main thread": time.thread_time, "process": time.process_time}


def _now() -> tuple[float, ...]:
    return tuple(clock() for clock in CLOCKS.values())


@dataclass
class Lockstep:
    """One run's marks on each of `CLOCKS` (the wall clock; the CPU time of the thread that trains, what
    feeds a GPU whatever else runs on the machine; the CPU time of every thread of the process, with the
    MLflow logger's): when the run started, and per step when the harness reached BATCH_END and when the
    twin's step after it ended."""

    start: tuple[float, ...] = ()
    reached: list[tuple[float, ...]] = field(default_factory=list)
    twin_done: list[tuple[float, ...]] = field(default_factory=list)
    counted_s: float = 0.0  # with FlopCounter: its counted step, as RunTimer timed it apart (wall)

    def harness_per_step(self, clock: int) -> float:
        """The harness's mean span per step after the warm-up on clock number `clock` (seconds, or whatever the
        marks count): from each twin step's end to the next BATCH_END."""
        spans = (self.reached[i][clock] - self.twin_done[i - 1][clock] for i in range(WARMUP_STEPS, len(self.reached)))
        return sum(spans) / (len(self.reached) - WARMUP_STEPS)

    def twin_per_step(self, clock: int) -> float:
        """The twin's mean span per step after the warm-up."""
        spans = (self.twin_done[i][clock] - self.reached[i][clock] for i in range(WARMUP_STEPS, len(self.reached)))
        return sum(spans) / (len(self.reached) - WARMUP_STEPS)

    def harness_us(self, clock: int) -> float:
        """The harness's microseconds per step after the warm-up, on clock number `clock` of `CLOCKS`."""
        return 1e6 * self.harness_per_step(clock)

    def twin_us(self, clock: int) -> float:
        """The twin's microseconds per step after the warm-up."""
        return 1e6 * self.twin_per_step(clock)

    def extra_us(self, clock: int) -> float:
        return self.harness_us(clock) - self.twin_us(clock)


class LockstepClock(Callback):
    """At every BATCH_END (after the other callbacks'), marks the time, runs one twin step, marks again.
    `now` reads the marks (every clock of `CLOCKS`; `step_calls` counts calls instead)."""

    def __init__(self, twin: HandTwin, marks: Lockstep, now: Callable[[], tuple[float, ...]] = _now):
        self.twin, self.marks, self.now = twin, marks, now

    def fit_start(self, state: Any, logger: Any) -> None:
        self.marks.start = self.now()

    def batch_end(self, state: Any, logger: Any) -> None:
        self.marks.reached.append(self.now())
        self.twin.step()
        self.marks.twin_done.append(self.now())


# The harness's path --------------------------------------------------------------------------------
def harness_trainer(data: Data, steps: int, callbacks: Sequence[Callback], loggers: Sequence[Any] = ()) -> Trainer:
    """The Trainer of every variant: the tiny model, flip and crop, SGD, an evaluation an epoch, fp32 as the twin."""
    model = Classifier(tiny_model(data.device), num_classes=CLASSES)
    return Trainer(
        model=model,
        train_dataloader=data.train_loader(),
        eval_dataloader=data.eval_loader(),
        eval_interval="1ep",
        max_duration=f"{steps}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        callbacks=list(callbacks),
        loggers=list(loggers),
        device=data.device,
        precision="fp32",  # as the hand-written loop
        seed=0,
        progress_bar=False,
    )


def trainer_run(
    data: Data,
    steps: int,
    pieces: int,
    store: MLflowStore,
    now: Callable[[], tuple[float, ...]] = _now,
    first: Sequence[Callback] = (),
    twin: HandTwin | None = None,
) -> tuple[Lockstep, Trainer]:
    """The Trainer with the first `pieces` of (RunTimer, FlopCounter, MLFlowLogger) beside its hand-written twin,
    marked by `now`; the logger writes its store from a thread at `pieces` 3, from its child process at 4.
    `first`: callbacks listed before the others (`step_phases` marks events with one); `twin`: a `HandTwin` (by
    default one evaluating on `twin_eval_steps`)."""
    marks, timer = Lockstep(), RunTimer("MulticlassAccuracy", 0.99)
    flops = FlopCounter(on_count=timer.time_apart)
    callbacks: list[Callback] = [timer, flops][: min(pieces, 2)]  # as cadence_harness.running.run.execute builds them
    trainer = harness_trainer(
        data,
        steps,
        callbacks=[*first, *callbacks, LockstepClock(twin or HandTwin(data, twin_eval_steps(steps)), marks, now)],
        loggers=[store.logger(out_of_process=pieces == 4)] if pieces >= 3 else [],
    )
    try:
        gc.collect()  # RunTimer collects when a fit starts: every row starts without a full collection due
        trainer.fit()
    finally:
        trainer.close()
    marks.counted_s = timer.warmup.total if pieces >= 2 and timer.warmup is not None else 0.0
    return marks, trainer


def control_run(data: Data, steps: int, now: Callable[[], tuple[float, ...]] = _now) -> Lockstep:
    """The A/A control: a second hand-written twin in the harness's place (evaluating where the harness does)
    beside the usual one, marked the same way. Identical work: its difference is the lockstep's own bias."""
    first, marks = HandTwin(data, harness_eval_steps(steps)), Lockstep()
    clock = LockstepClock(HandTwin(data, twin_eval_steps(steps)), marks, now)  # the harness's marks and twin step
    gc.collect()  # as `trainer_run`
    clock.fit_start(None, None)
    for _ in range(steps):
        first.step()
        clock.batch_end(None, None)
    return marks


def measure(data: Data, steps: int, repeats: int, store: MLflowStore) -> dict[str, list[Lockstep]]:
    """Every variant and the A/A control `repeats` times, interleaved, after a warm-up round (first runs are slower)."""

    def variant(pieces: int) -> Callable[[], Lockstep]:  # `trainer_run` with these pieces, giving its marks
        return lambda: trainer_run(data, steps, pieces, store)[0]

    runs = {name: variant(pieces) for pieces, name in enumerate(VARIANTS)} | {CONTROL: lambda: control_run(data, steps)}
    for run in runs.values():
        run()
    results: dict[str, list[Lockstep]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            results[name].append(run())
    return results


# The pieces alone ----------------------------------------------------------------------------------
def _median_us(work: Callable[[], int], repeats: int) -> float:
    """Median microseconds per unit of `work` (which returns how many units it did), after a warm-up."""
    _per_unit_us(work)
    return statistics.median(_per_unit_us(work) for _ in range(repeats))


def _per_unit_us(work: Callable[[], int]) -> float:
    start = time.thread_time()
    units = work()
    return 1e6 * (time.thread_time() - start) / units


def _paired_us(work: Callable[[], int], by_hand: Callable[[], int], repeats: int) -> tuple[float, float]:
    """(`work`, `by_hand`) median microseconds per unit, run alternately after a warm-up of each: a stretch in
    which the shared machine is slow moves both."""
    _per_unit_us(work), _per_unit_us(by_hand)
    pairs = [(_per_unit_us(work), _per_unit_us(by_hand)) for _ in range(repeats)]
    return statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)


def loader_alone(data: Data, repeats: int) -> tuple[float, float]:
    """(TensorLoader, hand-written) microseconds per batch over an epoch, with flip and crop."""
    loader, augment = data.train_loader(), loaders.FlipCrop(IMAGE_SIZE // 8)
    generator = torch.Generator(device=data.device)
    return _paired_us(
        lambda: sum(1 for _ in loader), lambda: sum(1 for _ in hand_batches(data, 0, generator, augment)), repeats
    )


def logging_alone(store: MLflowStore, calls: int, repeats: int) -> float:
    """Microseconds of one per-step ``log_metrics`` (a loss tensor and a learning rate) on the MLFlowLogger:
    the caller's share (the logger's threads read the values back and write them)."""
    logger = store.logger()
    loss, steps = torch.tensor(0.5, device=store.device), iter(range(1, 10**9))

    def log() -> int:
        for _ in range(calls):
            logger.log_metrics({"loss/train/total": loss, "lr-SGD/group0": 0.01}, next(steps))
        return calls

    try:
        return _median_us(log, repeats)
    finally:
        logger.flush(timeout_s=60)  # delivered before the store's folder goes
        logger.finish()


def evaluation_alone(data: Data, repeats: int) -> tuple[float, float]:
    """(Trainer.eval, hand-written evaluation) microseconds per eval batch."""
    model = Classifier(tiny_model(data.device), num_classes=CLASSES)
    trainer = Trainer(
        model=model, eval_dataloader=data.eval_loader(), device=data.device, precision="fp32", progress_bar=False
    )
    hand = tiny_model(data.device)
    batches = -(-len(data.test_y) // EVAL_BATCH_SIZE)

    def harness() -> int:
        trainer.eval()
        return batches

    def by_hand() -> int:
        hand_eval(hand, data)
        return batches

    try:
        return _paired_us(harness, by_hand, repeats)
    finally:
        trainer.close()


WALL, MAIN_THREAD = list(CLOCKS).index("wall"), list(CLOCKS).index("main thread")


def _where(device: torch.device) -> str:
    return f"{torch.cuda.get_device_name(device)} (the host: 1 thread)" if device.type == "cuda" else "CPU, 1 thread"


def flop_counted_step_ms(results: dict[str, list[Lockstep]]) -> tuple[float, float]:
    """(FlopCounter's counted step, its forward to BATCH_END; a steady harness step): ms of wall time, medians."""
    runs = results["+ FlopCounter"]
    return statistics.median(1e3 * r.counted_s for r in runs), statistics.median(r.harness_us(WALL) / 1e3 for r in runs)


def print_results(results: dict[str, list[Lockstep]]) -> None:
    """Per variant and clock, medians of the repeats: the harness's step, its twin's, and the difference."""
    print(f"{'us per step':<30}" + "".join(f" {name + ': harness':>20} {'twin':>7} {'extra':>7}" for name in CLOCKS))
    for name, runs in results.items():
        cells = []
        for clock in range(len(CLOCKS)):
            harness, twin, extra = (
                statistics.median(getattr(run, part)(clock) for run in runs)
                for part in ("harness_us", "twin_us", "extra_us")
            )
            cells.append(f" {harness:20.1f} {twin:7.1f} {extra:+7.1f}")
        print(f"{name:<30}" + "".join(cells))


def harness_extra_us(results: dict[str, list[Lockstep]], row: str, clock: int = MAIN_THREAD) -> Interval:
    """The harness's microseconds per step over its hand-written twin on clock number `clock` of `CLOCKS`,
    paired step by step within each run, with the 95% t-interval over the runs (`paired_goal`)."""
    runs = results[row]
    return paired_difference([run.harness_us(clock) for run in runs], [run.twin_us(clock) for run in runs])


def goal_lines(results: dict[str, list[Lockstep]], default_row: str) -> list[str]:
    """One verdict line per logger row and clock: the CUDA machine's row (the child writes) first, then the
    thread writer's; the row `default_row` (what cadence-bench runs on this machine) is marked."""
    judged = []
    for row, where in ((CHILD, "a CUDA machine's default"), (THREAD, "a CPU-only machine's default")):
        mark = ", as run here" if row == default_row else ""
        for clock in (WALL, MAIN_THREAD):
            label = f"{row.removeprefix('+ ')} ({where}{mark}), {list(CLOCKS)[clock]}:"
            judged.append((label, goal_text(harness_extra_us(results, row, clock), GOAL_US, "us per step")))
    width = max(len(label) for label, _ in judged)
    return [f"  {label:<{width}} {text}" for label, text in judged]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10 * STEPS_PER_EPOCH)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args(argv)
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps {args.steps} must exceed the {WARMUP_STEPS} warm-up steps")
    if args.device == "gpu" and not torch.cuda.is_available():
        parser.error("--device gpu: CUDA is not available here")
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    torch.set_num_threads(1)
    data = Data.build(args.batch_size, device)
    store = MLflowStore(device)
    try:
        results = measure(data, args.steps, args.repeats, store)
        loader_us, hand_loader_us = loader_alone(data, args.repeats)
        log_us = logging_alone(store, 300, args.repeats)
        eval_us, hand_eval_us = evaluation_alone(data, args.repeats)
    finally:
        store.close()
    print(
        f"host time per training step outside the model: {_where(device)}, Linear(3072, 10) on {args.batch_size} "
        f"images of 32x32 with flip+crop, {args.steps} steps ({STEPS_PER_EPOCH} an epoch, an evaluation of "
        f"{EVAL_BATCHES} batches of {EVAL_BATCH_SIZE} after each), each run in lockstep with a hand-written twin; "
        f"median of {args.repeats} runs of each variant, interleaved"
    )
    print(f"{cpu_description()}; torch {torch.__version__}")
    print_results(results)
    print(f"the harness over its hand-written twin, per step (goal: <= {GOAL_US:.0f} us on a CUDA machine's row):")
    print("\n".join(goal_lines(results, harness_variant(store.uri))))
    bias = interval_text(harness_extra_us(results, CONTROL), "us per step")
    print(f"  the lockstep's own bias (A/A: a second hand-written twin in the harness's place), main thread: {bias}")
    share = statistics.median(run.extra_us(MAIN_THREAD) / run.twin_us(MAIN_THREAD) for run in results[CHILD])
    print(f"  as a share of the twin's step: {100 * share:.0f} % (steadier across hosts than the us: a slower host "
          "slows both; python -m cadence_harness.benchmarks.step_calls counts the work itself)")  # fmt: skip
    print("the pieces alone (main-thread CPU time):")
    print(f"  loader + flip/crop: {loader_us:.1f} us per batch (hand-written {hand_loader_us:.1f}, "
          f"{loader_us - hand_loader_us:+.1f})")  # fmt: skip
    print(f"  MLFlowLogger.log_metrics of a step's loss and lr: {log_us:.1f} us per call (the caller's share)")
    print(f"  evaluation: {eval_us:.1f} us per eval batch (hand-written {hand_eval_us:.1f}, "
          f"{eval_us - hand_eval_us:+.1f})")  # fmt: skip
    counted_ms, steady_ms = flop_counted_step_ms(results)
    print(f"  FlopCounter's counted step: {counted_ms:.1f} ms (a steady step {steady_ms:.1f} ms), once per distinct "
          "shape, timed apart by RunTimer")  # fmt: skip


if __name__ == "__main__":
    main()
