"""The first run of a process against the runs after it: what a process's one-time costs add to a run's clock.

The runs of an in-process grid share one process; those of a process-per-run grid each start one. A cost paid
once per process inside a run's training clock (an import, a first use of a kernel, a cache filled) lengthens
the first run of an in-process grid, which biases the comparison against whichever arm runs first, and every
run of a process-per-run grid, which pulls every time ratio toward 1. This trains the demo's baseline (ResNet-20
on sklearn's digits; on CIFAR-10's first 2,000 images when `--data-dir` holds them) `--runs` times in each of
`--processes` fresh processes, the same seed each time, and prints each run's training time and the first run's
over the median of the others. Until 2026-11-29 the first run trained 1.5-2 s longer on a 2-CPU VM: torchmetrics
was imported at the first evaluation, inside the clock (`harness/measurements/2026-11-29-first-evaluation-import.md`).
Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.first_run [--runs 4] [--processes 2] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from cadence_harness.benchmarks.machine import cpu_description

__all__ = ["main", "train_times"]


def train_times(runs: int, data_dir: str | None) -> tuple[str, list[float]]:
    """The demo's name and ``final/train_s`` of its baseline trained `runs` times in this process."""
    from cadence_harness.demo import demo_recipe
    from cadence_harness.running.run import execute
    from cadence_harness.running.runspec import RunSpec

    recipe, _ = demo_recipe(data_dir)
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            spec, uri = RunSpec(recipe, (), 0), f"sqlite:///{folder}/runs.db"
            result = execute(spec, tracking_uri=uri, data_dir=data_dir, progress_bar=False)
        times.append(result.metrics["final/train_s"])
    return recipe.name, times


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per process (at least 2)")
    parser.add_argument("--processes", type=int, default=2, help="fresh processes, one after another")
    parser.add_argument("--data-dir", help="a folder holding cifar10_jpeg.npz (default: sklearn's digits)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 2 or args.processes < 1:
        parser.error(f"--runs {args.runs} --processes {args.processes}: need --runs >= 2 and --processes >= 1")
    if args.child:
        name, times = train_times(args.runs, args.data_dir)
        print(json.dumps({"name": name, "times": times}))
        return
    child = [sys.executable, "-m", __spec__.name, "--child", "--runs", str(args.runs)]
    child += ["--data-dir", args.data_dir] if args.data_dir else []
    print(f"first run of a process against the runs after it, {args.runs} runs per process; {cpu_description()}")
    for process in range(args.processes):
        output = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        reading = json.loads(output.strip().splitlines()[-1])
        first, later = reading["times"][0], statistics.median(reading["times"][1:])
        runs = ", ".join(f"{t:.2f}" for t in reading["times"])
        ratio = f"first over the rest's median {first / later:.2f}x"
        print(f"  process {process + 1} ({reading['name']}): train_s {runs}; {ratio}")
    print("A first run within the spread of the later ones: the process's one-time costs stay out of the clock.")


if __name__ == "__main__":
    main()
