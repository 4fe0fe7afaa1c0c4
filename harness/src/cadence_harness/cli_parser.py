"""The ``cadence-bench`` command line's arguments: one subcommand each for run, grid, report, demo, export,
spread, methods (and the grid's hidden worker); `cadence_harness.cli` runs them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from cadence_harness.running.scale_out import FSDP_STRATEGIES

__all__ = ["UsageError", "build_parser"]

DESCRIPTION = (
    "Train and compare speed-up methods. run: one configuration; grid: a recipe's arms x budgets x seeds; "
    "report: tables, plots and the method cards from run records; demo: a small comparison in minutes. "
    "Tradeoff curves: --durations 2ep,4ep,8ep (or a recipe's durations) runs every arm once per budget, each "
    "schedule decayed at its own end; report reads off each arm's speedup at matched accuracy in FLOPs and time. "
    "A grid appends its runs to method_cards/runs/<experiment>.jsonl, from which report --study builds all."
)
TRACKING_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"
RECORDS_HELP = (
    "folder of run records <experiment>.jsonl (default: $CADENCE_RECORDS, else the repository's method_cards/runs, "
    "else ./method_cards/runs)"
)


class UsageError(ValueError):
    """A command line argparse cannot parse: `main` prints it as the one line of every refusal, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors one line naming the argument, the bad value and the fix (as every refusal of
    ``cadence-bench`` is; harness/README.md), instead of a screenful of usage before it. Subcommands' parsers
    are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def _number(kind: Callable[[str], Any], least: float, strictly: bool, what: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that reads a number of `kind` and refuses one below `least` (or at it, `strictly`),
    NaN and infinity: such a value would run nothing useful, or fail later with a traceback (``--jobs 0``), or
    print nonsense (``--rate -1`` estimated negative minutes)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or value < least or (strictly and value == least):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    return parse


# The flags of recipe keys (--subset, --seeds, --nproc, ...) stay plain ints: the recipe checks them, with their key.
COUNT = _number(int, 1, False, "an int >= 1")
SECONDS = _number(float, 0, True, "a number of seconds > 0")
RATE = _number(float, 0, True, "a number of GFLOP/s > 0, e.g. 50")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help=TRACKING_HELP)
    parser.add_argument("--data-dir", help="folder holding the dataset files (also: $CADENCE_DATA)")
    parser.add_argument("--download", action="store_true", help="let torchvision download a dataset not found locally")


def _recipe_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key: batch_size=256, optimizer.lr=0.2, mixup.alpha=0.4",
    )
    parser.add_argument("--model", help="tv/<name>, timm/<name> or hf/<name-or-folder>")
    parser.add_argument("--data", help="cifar10, fashion_mnist, digits, sst2, synthetic, synthetic_text")
    parser.add_argument("--duration", help="training length: 10ep, 500ba, 3e4sp (replaces the recipe's durations)")
    parser.add_argument(
        "--durations",
        metavar="A,B,...",
        help="a sweep of budgets for tradeoff curves, e.g. 2ep,4ep,8ep,16ep: one run per budget, each with the "
        "schedule decayed at its end (replaces the recipe's duration)",
    )
    parser.add_argument(
        "--curve",
        choices=["sweep", "cyclic"],
        help="with durations: sweep (one run per budget) or cyclic (one run per arm and seed whose learning rate "
        "cycles end at the budgets; the baseline also runs the sweep, to check it against)",
    )
    parser.add_argument("--subset", type=int, help="train on the first N training samples")
    parser.add_argument("--eval-subset", type=int, help="evaluate on the first N test samples")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--device", choices=["cpu", "gpu"])
    parser.add_argument("--seeds", type=int, help="number of seeds (0, 1, ..., N-1)")
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train each run on N processes launched with torchrun (CPU: gloo; gpu: N GPUs, NCCL); batch_size is "
        "the global batch, split across them; DDP unless --fsdp",
    )
    parser.add_argument(
        "--fsdp",
        nargs="?",
        const="FULL_SHARD",
        choices=FSDP_STRATEGIES,
        metavar="STRATEGY",
        help="shard the model with FSDP2 (Trainer parallelism_config={'fsdp': ...}) instead of DDP; optional "
        f"sharding_strategy: {', '.join(FSDP_STRATEGIES)} (default FULL_SHARD); more options: --set fsdp.KEY=VALUE",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cadence-bench", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train one configuration (one or more seeds) in this process")
    run.add_argument("recipe", nargs="?", help="a recipe file or shipped recipe name (optional)")
    run.add_argument("--methods", help="comma-separated methods, e.g. mixup,label_smoothing")
    run.add_argument("--experiment", help="MLflow experiment when no recipe is given")
    run.add_argument("--no-progress", action="store_true")
    _recipe_flags(run)
    _common(run)

    grid = commands.add_parser("grid", help="a recipe's arms x budgets x seeds, interleaved")
    grid.add_argument("recipe", help="a recipe file or shipped recipe name")
    grid.add_argument("--methods", help="the methods the arms range over (default: the recipe's)")
    grid.add_argument("--arms", help="comma-separated: baseline, each, leave_one_out, pairs, all")
    grid.add_argument(
        "--combination", action="append", default=[], metavar="A+B", help="an extra arm, e.g. mixup+cutout"
    )
    grid.add_argument(
        "--shard", default="1/1", help="run only shard i of n, e.g. 1/2 (machines sharing a tracking server)"
    )
    rerun = grid.add_mutually_exclusive_group()
    rerun.add_argument("--rerun-finished", action="store_true", help="run even configurations MLflow already has")
    rerun.add_argument(
        "--rerun-elsewhere",
        action="store_true",
        help="run again each configuration whose newest finished run ran on another machine, so that the study's "
        "times all come from this one (the newest run of a configuration counts)",
    )
    grid.add_argument("--dry-run", action="store_true", help="list the runs and their config hashes, run nothing")
    grid.add_argument("--timeout", type=SECONDS, help="seconds before a run is killed and recorded failed (--isolate)")
    where = grid.add_mutually_exclusive_group()
    where.add_argument("--isolate", action="store_const", const=True, help="one process per run (default on CPU)")
    where.add_argument("--in-process", dest="isolate", action="store_const", const=False, help="(default on GPU)")
    grid.add_argument("--time-limit", type=SECONDS, metavar="S", help="start no run after S seconds (rerun to go on)")
    grid.add_argument("--log-dir", default="cadence_runs/logs", help="where each run's console output goes")
    grid.add_argument("--jobs", type=COUNT, default=1, help="runs at once (default 1: concurrent runs distort timings)")
    grid.add_argument(
        "--estimate", action="store_true", help="list the runs, estimate their FLOPs and time; run nothing"
    )
    grid.add_argument(
        "--rate", type=RATE, help="with --estimate: GFLOP/s to assume (else the study's records, else here)"
    )
    grid.add_argument(
        "--records", help="import the runs recorded here before starting, append each finished run; " + RECORDS_HELP
    )
    grid.add_argument("--no-records", action="store_true", help="neither import nor write run records")
    grid.add_argument(
        "--search",
        action="store_true",
        help="run the combinations the study's recipe search waits for, round after round, until it ends "
        "(with --dry-run: name the next ones); see harness/README.md",
    )
    _recipe_flags(grid)
    _common(grid)

    report = commands.add_parser("report", help="tables and plots from MLflow or run records; --cards: the cards")
    report.add_argument("--experiment", action="append", default=[], help="experiment(s) to report (default: all)")
    report.add_argument("--records", help="a run-record file or folder to report from, instead of MLflow")
    report.add_argument(
        "--study",
        action="append",
        default=[],
        help="report a study from its committed records (method_cards/runs/STUDY.jsonl), the grid of recipe STUDY; "
        "repeat (or separate by commas) for several studies",
    )
    report.add_argument("--out", default="cadence_runs/report", help="folder for report.md, summary.csv and plots")
    report.add_argument(
        "--cards",
        action="store_true",
        help="with --study: write Results into the method cards and method_cards/INDEX.md",
    )
    report.add_argument("--min-seeds", type=COUNT, default=3, help="arms with fewer seeds stay out of the cards")
    report.add_argument("--methods-root", help=argparse.SUPPRESS)
    report.add_argument("--index", help=argparse.SUPPRESS)
    report.add_argument("--tracking-uri", help=TRACKING_HELP)

    demo = commands.add_parser("demo", help="a small CPU comparison on real data, in a few minutes")
    demo.add_argument("--out", default="cadence_runs/demo", help="folder for the table, plots and logs")
    demo.add_argument("--rerun", action="store_true", help="train again even if the demo's runs are in MLflow")
    demo.add_argument(
        "--isolate", action="store_true", help="one process per run (default: the 4 runs in this process, faster)"
    )
    _common(demo)

    export = commands.add_parser("export", help="append an experiment's finished MLflow runs to its run records")
    export.add_argument("experiment")
    export.add_argument("--records", help=RECORDS_HELP)
    export.add_argument("--tracking-uri", help=TRACKING_HELP)

    spread = commands.add_parser(
        "spread", help="training time across seeds of one configuration, per machine start, against the 3%% goal"
    )
    spread.add_argument("experiment", nargs="+", help="experiments whose run records to read (e.g. cifar10_fast)")
    spread.add_argument("--records", help=RECORDS_HELP)
    spread.add_argument("--min-seeds", type=COUNT, default=3, help="configurations with fewer seeds are left out")

    commands.add_parser("methods", help="list the installed methods: what each does, and its hyperparameters")

    worker = commands.add_parser("worker")  # internal: one grid run in its own process
    worker.add_argument("spec")
    worker.add_argument("--run-id-file")
    worker.add_argument("--microbatch-size", type=COUNT)
    worker.add_argument("--tag", action="append", default=[])
    worker.add_argument("--progress", action="store_true")
    _common(worker)
    return parser
