"""Run every benchmark: start-up, trainer overhead, the harness's host time, Python calls and phases per step, the
operations a real recipe's step dispatches, a process's first run against its later ones, the loaders alone,
augmentation, model surgery, the compiled step, memory per rank under FSDP2."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

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


def _summary(name: str) -> str:
    """The first paragraph of benchmark `name`'s docstring as one plain line, read from its source: importing the
    benchmarks (torch, the models) would cost seconds before ``--help`` could answer."""
    spec = importlib.util.find_spec(f"cadence_harness.benchmarks.{name}")
    origin = spec.origin if spec is not None else None
    doc = ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8"))) if origin else None
    return " ".join((doc or "").split("\n\n")[0].split()).replace("``", "")


def main(argv: Sequence[str] | None = None) -> None:
    """Each benchmark in turn, with its defaults; ``--help`` names them (each takes its own options when run
    alone: ``python -m cadence_harness.benchmarks.NAME --help``) and runs none."""
    listing = "\n".join(f"  {name}: {_summary(name)}" for name in BENCHMARKS)
    parser = argparse.ArgumentParser(
        prog="python -m cadence_harness.benchmarks",
        description=__doc__,
        epilog=f"benchmarks, in the order they run:\n{listing}\n\none alone, with its options: python -m "
        "cadence_harness.benchmarks.NAME --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)
    for name in BENCHMARKS:
        module = importlib.import_module(f"cadence_harness.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main([])


if __name__ == "__main__":
    main()
