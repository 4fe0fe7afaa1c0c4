"""Run every benchmark: trainer overhead, then augmentation costs, then model-surgery costs."""

from __future__ import annotations

import importlib

BENCHMARKS = ("overhead", "augment", "surgery")


def main() -> None:
    for name in BENCHMARKS:
        module = importlib.import_module(f"cadence_harness.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main([]) if name in ("overhead", "surgery") else module.main()


if __name__ == "__main__":
    main()
