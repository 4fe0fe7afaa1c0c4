"""Run every benchmark: start-up, trainer overhead, the harness's host time, Python calls and phases per step, the
operations a real recipe's step dispatches, a process's first run against its later ones, the loaders alone,
augmentation, model surgery, the compiled step, memory per rank under FSDP2."""

from __future__ import annotations

import importlib

BENCHMARKS = (
    "startup",
    "overhead",
    "harness_step",
    "step_calls",
    "step_phases",
    "step_ops",
    "first_run",
    "loader_rate",
    "augment",
    "surgery",
    "compiled",
    "sharded_memory",
)


def main() -> None:
    for name in BENCHMARKS:
        module = importlib.import_module(f"cadence_harness.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main([])


if __name__ == "__main__":
    main()
