"""`cadence-bench demo`: a small CPU comparison of methods on real data, in a few minutes.

ResNet-20 on the first 2,000 CIFAR-10 training images when ``cifar10_jpeg.npz`` can be found
(``../shared/data``, ``--data-dir`` or ``$CADENCE_DATA``), else on sklearn's digits, which is
always there. Baseline against up to two installed methods alone and together, one seed.
Runs go to the local MLflow store; the table, plots and the way to browse them are printed.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadence.registry import registry
from cadence_harness.running.data import DataNotFoundError, find_dataset_files
from cadence_harness.running.recipe import Recipe, load_recipe
from cadence_harness.running.tracking import resolve_tracking_uri
from cadence_harness.store_report import build_report

__all__ = ["PREFERRED_METHODS", "demo_recipe", "run_demo"]

# Cheap methods that act on real pixel values or labels, in the order the demo picks them.
PREFERRED_METHODS = ["label_smoothing", "mixup", "cutout", "blurpool", "cutmix", "colout", "channels_last"]


def _pick_methods(installed: list[str], count: int = 2) -> list[str]:
    return [m for m in PREFERRED_METHODS if m in installed][:count]


def demo_recipe(data_dir: str | None = None) -> tuple[Recipe, str]:
    """The demo's recipe and a sentence saying which data it uses and why."""
    methods = _pick_methods(sorted(registry().methods))
    common: dict[str, Any] = {
        "model": "tv/resnet20",
        "batch_size": 64,
        "seeds": [0],
        "device": "cpu",
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4, "nesterov": True},
        "schedule": {"name": "cosine_warmup", "t_warmup": "0.1dur"},
        "methods": {m: {} for m in methods},
        "grid": {"arms": ["baseline", "each"], "combinations": [methods] if len(methods) > 1 else []},
    }
    try:
        found = find_dataset_files("cifar10", ["cifar10_jpeg.npz"], data_dir)
        values = {
            **common,
            "name": "demo-cifar10",
            "data": "cifar10",
            "subset": 2000,
            "eval_subset": 1000,
            "duration": "4ep",
            "augment": "flip_crop",
            "target_accuracy": 0.4,
        }
        note = f"ResNet-20 on the first 2,000 CIFAR-10 training images from {found} (1,000 test images)"
    except DataNotFoundError:
        values = {**common, "name": "demo-digits", "data": "digits", "duration": "6ep", "target_accuracy": 0.9}
        note = "ResNet-20 on sklearn's 8x8 digits (CIFAR-10 was not found; pass --data-dir to use it)"
    chosen = ", ".join(methods) if methods else "none installed: the demo runs the baseline only"
    return load_recipe(values, source="cadence-bench demo"), f"{note}; methods: {chosen}"


def run_demo(
    *,
    run_grid: Callable[..., Any],
    out_dir: str | Path = "cadence_runs/demo",
    tracking_uri: str | None = None,
    data_dir: str | None = None,
    rerun: bool = False,
    isolate: bool = False,
) -> int:
    """Run the demo's grid with `run_grid` (`cadence_harness.running.grid.run_grid`, which the CLI passes, as it
    does to the combination search), then print its report; 1 if a run failed.

    The runs go one after another in this process unless `isolate`: a CPU grid's default of a process per run
    guards long studies against a crash or a hang, and costs each of the demo's short runs its interpreter,
    imports and MLflow store again (111 s against 82 s for the demo's 4 runs on a 2-CPU VM, the same results).
    """
    uri = resolve_tracking_uri(tracking_uri)
    recipe, note = demo_recipe(data_dir)
    print(f"cadence-bench demo: {note}.")
    print(f"Runs are logged to {uri}; finished runs are reused (pass --rerun to train them again).")
    print("One seed, on a CPU that may be busy: small differences are noise; claims need a grid with >= 3 seeds.\n")
    command = shlex.join(["cadence-bench", *sys.argv[1:]]) if sys.argv[1:2] == ["demo"] else "cadence-bench demo"
    result = run_grid(
        recipe,
        tracking_uri=uri,
        rerun_finished=rerun,
        isolate=isolate,
        data_dir=data_dir,
        log_dir=Path(out_dir) / "logs",
        command=command,
    )
    print(result.summary())
    report = build_report([recipe.name], tracking_uri=uri, out_dir=out_dir)
    print()
    print(report.markdown)
    for path in report.files:
        print(f"wrote {path}")
    print("\nBrowse every run, metric and artifact in the MLflow UI:")
    print(f"  mlflow ui --backend-store-uri {uri}")
    print("  then open http://127.0.0.1:5000")
    if result.failed:
        where = (
            f"their logs are in {Path(out_dir) / 'logs'}"
            if isolate
            else f"their errors are in their FAILED runs in {uri}"
        )
        print(f"\n{len(result.failed)} run(s) failed; {where}", file=sys.stderr)
        return 1
    return 0
