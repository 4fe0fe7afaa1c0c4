"""The workload whose instructions per step `valgrind --tool=callgrind` counts: `harness_step`'s Trainer run (the
loader, RunTimer, FlopCounter, an evaluation each epoch) without its twin, or the hand-written twin alone.

Counted twice, for 64 and 192 steps, the difference over 128 steps is the steady step's instructions (the start-up
and the warm-up fit are in both). Fix the string-hash seed, and compare code at several: the dict probes that string
hashes cause move the count by about 90 k per step between seeds, and by up to 220 k between random ones
(harness/measurements/2026-11-29-lockstep-host-time.md, session 20). The automatic collector is off in the counted
fit (RunTimer still collects as the fit starts), so a collection that one run happens to make does not count.

    for steps in 64 192; do PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=cg.$steps.out \\
        python -m cadence_harness.benchmarks.instructions_workload trainer $steps; done

Code to compare runs from a worktree with ``PYTHONPATH`` ahead of the editable installs.
"""

from __future__ import annotations

import argparse
import gc

import torch

from cadence import Trainer
from cadence_harness.benchmarks.harness_step import WARMUP_STEPS, harness_trainer
from cadence_harness.benchmarks.step_workload import Data, HandTwin, harness_eval_steps
from cadence_harness.running.flops import FlopCounter
from cadence_harness.running.timing import RunTimer

__all__ = ["hand_run", "main", "trainer_run"]


def trainer_run(data: Data, steps: int) -> Trainer:
    """`steps` steps of the Trainer with the loader, RunTimer and FlopCounter, as `harness_step` runs them."""
    timer = RunTimer("MulticlassAccuracy", 0.99)
    trainer = harness_trainer(data, steps, callbacks=[timer, FlopCounter(on_count=timer.time_apart)])
    try:
        trainer.fit()
    finally:
        trainer.close()
    return trainer


def hand_run(data: Data, steps: int) -> HandTwin:
    """`steps` steps of the hand-written twin, evaluating as often and where the Trainer does (alone, nothing is
    warmed by another loop's evaluation)."""
    twin = HandTwin(data, harness_eval_steps(steps))
    for _ in range(steps):
        twin.step()
    return twin


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("loop", choices=("trainer", "hand"))
    parser.add_argument("steps", type=int)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = Data.build(args.batch_size)
    run = trainer_run if args.loop == "trainer" else hand_run
    run(data, WARMUP_STEPS)  # imports and first builds, in both counts
    gc.collect()
    gc.disable()
    try:
        run(data, args.steps)
    finally:
        gc.enable()


if __name__ == "__main__":
    main()
