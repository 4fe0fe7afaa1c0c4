"""Start-up: ``import cadence`` and a first ``Trainer(...)`` on a tiny model, in fresh interpreters.

Three scripts, each run in a new Python process, interleaved, the median of the repeats:

* ``import torch``: the floor every PyTorch program pays;
* ``import torch`` + a torch SGD on a tiny model: torch imports ``torch._dynamo`` (and sympy) the first
  time any optimizer adds a parameter group, so a hand-written loop pays this too;
* ``import cadence`` + ``Trainer(...)`` on the same tiny model (which builds the same optimizer).

The line that matters is the last one minus the second: what cadence itself adds. Issue 13's target is
<= 2 s for the whole third line. Also lists which heavy libraries the third script imported (none
should be: torchmetrics comes in with a fit that evaluates). Prints numbers; it is not a test.

    python -m cadence_harness.benchmarks.startup [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from cadence_harness.benchmarks.machine import cpu_description

TARGET_S = 2.0
HEAVY = ("torchmetrics", "transformers", "scipy", "matplotlib", "torchvision", "timm", "mlflow", "sympy")
_MODEL = "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))"
SCRIPTS = {
    "import torch": "import torch",
    "import torch + SGD": f"import torch\nmodel = {_MODEL}\ntorch.optim.SGD(model.parameters(), lr=0.1)",
    "import cadence + Trainer(...)": (
        "import torch\nfrom cadence import Classifier, Trainer\n"
        f"model = Classifier({_MODEL}, num_classes=2)\n"
        "Trainer(model=model, max_duration='1ep', device='cpu', progress_bar=False)"
    ),
}
_REPORT = "\nimport json, sys\nprint(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"


def _run(script: str) -> tuple[float, set[str]]:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", script + _REPORT], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, set(json.loads(result.stdout.strip().splitlines()[-1]))


def measure(repeats: int = 3) -> tuple[dict[str, float], dict[str, set[str]]]:
    """Median seconds per script, and the top-level modules each script imported."""
    seconds: dict[str, list[float]] = {name: [] for name in SCRIPTS}
    modules: dict[str, set[str]] = {}
    for _ in range(repeats + 1):  # the first pass warms the file cache and is dropped
        for name, script in SCRIPTS.items():
            elapsed, modules[name] = _run(script)
            seconds[name].append(elapsed)
    return {name: statistics.median(values[1:]) for name, values in seconds.items()}, modules


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    medians, modules = measure(args.repeats)
    print(f"start-up, fresh interpreters, median of {args.repeats} interleaved runs (wall clock)")
    print(cpu_description())
    for name, seconds in medians.items():
        print(f"{name:<30} {seconds:6.2f} s")
    whole = medians["import cadence + Trainer(...)"]
    added = whole - medians["import torch + SGD"]
    print(f"cadence adds {added:.2f} s to a torch program that builds an optimizer")
    print(f"target: import cadence + Trainer(...) <= {TARGET_S:.0f} s: {'PASS' if whole <= TARGET_S else 'FAIL'}")
    trainer, torch_only = modules["import cadence + Trainer(...)"], modules["import torch + SGD"]
    heavy = sorted(name for name in HEAVY if name in trainer and name not in torch_only)
    from_torch = sorted(name for name in HEAVY if name in torch_only)
    print(f"heavy libraries cadence imported: {', '.join(heavy) or 'none'}")
    print(f"imported by torch's optimizer in both: {', '.join(from_torch) or 'none'}")


if __name__ == "__main__":
    main()
