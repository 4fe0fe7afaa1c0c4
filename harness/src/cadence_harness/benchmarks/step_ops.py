"""Host work per training step, counted in dispatched torch operations, by phase of the step.

On a GPU a small, fast step is host-bound: the host thread spends its time dispatching and launching each
operation, and when the host takes longer than the device, training time follows the host's speed (one H200
start: training time tracked the training thread's CPU time with r = 0.99,
harness/measurements/2026-11-28-h200-timing.md). Wall-clock host time is noisy on shared machines; the
number of operations a step dispatches is not. Each one is at least one kernel launch on a GPU, so the count
says how much host work a recipe's step asks for and where it sits: the loader, the methods before the
forward, the forward, the loss, the backward, the optimizer with the batch-end methods, and what runs
between steps.

Counted below autograd (a ``TorchDispatchMode``), so backward operations count too, on a real recipe run
(`running.run.execute`, the path `cadence-bench run` takes) on the CPU, over steady steps only: the first
`--skip` steps pay warm-up and the FLOP counter's counted pass. Not a GPU count in three ways, each stated in
the output: the CPU's default optimizer loops over parameters where CUDA's uses multi-tensor (foreach)
kernels, a CUDA step copies nothing to the device the tensor loader has not placed there already, and fused
kernels of a CUDA library may differ. It prints counts; it is not a test.

    python -m cadence_harness.benchmarks.step_ops [cifar10_fast ...] [--steps 10] [--skip 5] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cadence import Callback, Event

__all__ = ["PHASES", "OpCounter", "count_recipe", "main"]

# The phase that starts when the callback sees each event. Callbacks run after the methods on every event,
# so a method's work at an event counts in the phase that event ends (e.g. Lookahead's BATCH_END work in
# "optimizer and batch-end methods").
PHASE_AT = {
    Event.BEFORE_DATALOADER: "loader",
    Event.AFTER_DATALOADER: "methods before the forward",
    Event.BEFORE_FORWARD: "forward",
    Event.AFTER_FORWARD: "loss",
    Event.AFTER_LOSS: "backward",
    Event.AFTER_BACKWARD: "optimizer and batch-end methods",
    Event.BATCH_END: "between steps",
}
PHASES = tuple(dict.fromkeys(PHASE_AT.values()))
_IGNORED = {"aten::detach", "aten::alias"}  # views autograd makes for itself: no kernel on any device


class _Dispatched(TorchDispatchMode):
    """Counts every operation dispatched below autograd into the counter's current phase."""

    def __init__(self, counter: OpCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counter.dispatched(func.name())
        return func(*args, **(kwargs or {}))


class OpCounter(Callback):
    """Counts the operations of training steps `skip` to `skip + steps - 1` (0-based) by phase; evaluation
    and the steps outside the window are not counted."""

    def __init__(self, steps: int = 10, skip: int = 5) -> None:
        if steps < 1 or skip < 0:
            raise ValueError(f"steps={steps!r} must be >= 1 and skip={skip!r} >= 0")
        self.steps, self.skip = steps, skip
        self.ops: dict[str, Counter[str]] = defaultdict(Counter)
        self.counted_steps = 0
        self._phase: str | None = None
        self._mode: _Dispatched | None = None

    def dispatched(self, name: str) -> None:
        if self._phase is not None and name not in _IGNORED:
            self.ops[self._phase][name] += 1

    def run_event(self, event: Event, state: Any, logger: Any) -> None:
        if event is Event.FIT_START:
            self._mode = _Dispatched(self)
            self._mode.__enter__()
        elif event is Event.FIT_END and self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        elif event is Event.EVAL_BEFORE_ALL:
            self._phase = None
        elif event in PHASE_AT:
            batch = state.timestamp.batch  # batches finished so far: the running step's index until BATCH_END
            in_window = self.skip <= batch < self.skip + self.steps
            if event is Event.BATCH_END:  # the step is done: its "between steps" runs until the next loader
                in_window = self.skip < batch <= self.skip + self.steps
                self.counted_steps += in_window
            self._phase = PHASE_AT[event] if in_window else None

    def handles(self, event: Event) -> bool:
        return event in PHASE_AT or event in (Event.FIT_START, Event.FIT_END, Event.EVAL_BEFORE_ALL)

    def per_step(self) -> dict[str, float]:
        """Operations per counted step, by phase (in `PHASES` order)."""
        steps = max(self.counted_steps, 1)
        return {phase: sum(self.ops[phase].values()) / steps for phase in PHASES}


def count_recipe(recipe: str, steps: int, skip: int, data_dir: str | None, batch_size: int = 16) -> OpCounter:
    """Run `recipe` on the CPU for `skip + steps` steps at `batch_size` (operation counts do not depend on
    it), with a short evaluation, into a temporary MLflow store; returns the counter."""
    from cadence_harness.running.recipe import load_recipe
    from cadence_harness.running.run import execute
    from cadence_harness.running.runspec import RunSpec

    total = skip + steps + 1  # one more step ends the last counted step's "between steps"
    overrides = {
        "device": "cpu",
        "batch_size": batch_size,
        "subset": batch_size * total,
        "duration": f"{total}ba",
        "eval_subset": 100,
        "eval_batch_size": 100,
        "eval_interval": f"{total}ba",
    }
    counter = OpCounter(steps, skip)
    with tempfile.TemporaryDirectory() as store:
        spec = RunSpec(load_recipe(recipe, overrides), (), 0)
        execute(
            spec,
            tracking_uri=f"sqlite:///{store}/mlflow.db",
            data_dir=data_dir,
            progress_bar=False,
            observers=[counter],
        )
    return counter


def _table(name: str, counter: OpCounter, top: int) -> str:
    per_step = counter.per_step()
    lines = [
        f"{name}: torch operations per training step (steps {counter.skip}-{counter.skip + counter.steps - 1}, "
        f"{counter.counted_steps} counted, CPU)",
        f"{'phase':<34}{'ops/step':>9}  most frequent",
    ]
    for phase in PHASES:
        common = ", ".join(
            f"{op.removeprefix('aten::')} {n / max(counter.counted_steps, 1):.3g}"
            for op, n in counter.ops[phase].most_common(top)
        )
        lines.append(f"{phase:<34}{per_step[phase]:>9.1f}  {common}")
    lines.append(f"{'the step':<34}{sum(per_step.values()):>9.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="*", default=["cifar10_fast"])
    parser.add_argument("--steps", type=int, default=10, help="steps counted (default 10: two Lookahead periods)")
    parser.add_argument("--skip", type=int, default=5, help="steps not counted first (warm-up, FLOP counting)")
    parser.add_argument("--top", type=int, default=4, help="most frequent operations shown per phase")
    parser.add_argument("--data-dir", default=os.environ.get("CADENCE_DATA"))
    args = parser.parse_args(argv)
    from cadence_harness.running.recipe_checks import RecipeError

    torch.set_num_threads(1)
    for recipe in args.recipes:
        try:
            counter = count_recipe(recipe, args.steps, args.skip, args.data_dir)
        except (FileNotFoundError, RecipeError) as missing:  # e.g. the recipe's dataset is not on this machine
            print(f"{recipe}: skipped ({missing})")
            continue
        print(_table(recipe, counter, args.top), flush=True)
    print(
        "Each dispatched operation is host work; on a GPU all but views (view, slice, unsqueeze, ...) launch a "
        "kernel. The CPU's optimizer loops over parameters where CUDA's default runs multi-tensor kernels, so the "
        "optimizer row overstates a GPU's; its `_local_scalar_dense` is the CPU's per-step loss check (CUDA reads "
        "the losses every 50 steps)."
    )


if __name__ == "__main__":
    main()
