"""Run every benchmark: start-up, trainer overhead, augmentation, model surgery, the compiled step."""

from __future__ import annotations

import importlib

BENCHMARKS = ("startup", "overhead", "augment", "surgery", "compiled")


def main() -> None:
    for name in BENCHMARKS:
        module = importlib.import_module(f"cadence_harness.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main([])


if __name__ == "__main__":
    main()
