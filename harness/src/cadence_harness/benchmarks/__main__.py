"""Run every benchmark: trainer overhead, then augmentation and method costs."""

from __future__ import annotations

import importlib

BENCHMARKS = ("overhead", "augment")


def main() -> None:
    for name in BENCHMARKS:
        module = importlib.import_module(f"cadence_harness.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main([]) if name == "overhead" else module.main()


if __name__ == "__main__":
    main()
