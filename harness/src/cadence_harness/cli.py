"""``cadence-bench``: run, grid, report, export, demo, methods (and the grid's hidden worker).

Tradeoff curves: ``--durations 2ep,4ep,8ep`` (or a recipe's ``durations``) runs every arm once per budget, each
schedule decayed at its own end; ``report`` reads off each arm's speedup at matched accuracy in FLOPs and time.
A grid appends its runs to ``method_cards/runs/<experiment>.jsonl``, from which ``report --study`` builds all.
"""

from __future__ import annotations

import argparse
import inspect
import shlex
import sys
from pathlib import Path
from typing import Any

from cadence import NotApplicableError
from cadence_harness.reading.study import StudyError, studies_runs
from cadence_harness.records import TAG, RecordError, default_records_dir, records_file
from cadence_harness.running.bridge import export_runs
from cadence_harness.running.budgets import leaf_recipes
from cadence_harness.running.data import REPO_ROOT, check_data_dir
from cadence_harness.running.grid import parse_shard, run_grid, select_shard
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import RecipeError, load_recipe, method_names, parse_value
from cadence_harness.running.runspec import RunSpec
from cadence_harness.running.tracking import resolve_tracking_uri
from cadence_harness.store_report import build_report

__all__ = ["main"]

TRACKING_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"
RECORDS_HELP = (
    "folder of run records <experiment>.jsonl (default: $CADENCE_RECORDS, else the repository's method_cards/runs, "
    "else ./method_cards/runs)"
)


def _overrides(pairs: list[str]) -> dict[str, Any]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RecipeError(
                f"`--set` {pair!r}: write key=value, e.g. --set mixup.alpha=0.4 or --set optimizer.lr=0.2"
            )
        overrides[key.strip()] = parse_value(value.strip())
    return overrides


def _flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Recipe keys set by dedicated flags (--duration, --seeds, ...), applied after --set.

    ``--duration`` replaces a recipe's sweep of ``durations`` by that one budget (see `apply_overrides`).
    """
    flags = {
        "model": args.model,
        "data": args.data,
        "duration": args.duration,
        "durations": _methods(args.durations) or None,
        "curve": args.curve,
        "subset": args.subset,
        "eval_subset": args.eval_subset,
        "batch_size": args.batch_size,
        "device": args.device,
        "seeds": args.seeds,
    }
    return {key: value for key, value in flags.items() if value is not None}


def _methods(text: str | None) -> list[str]:
    return [m.strip() for m in text.split(",") if m.strip()] if text else []


def _command() -> str:
    return shlex.join(["cadence-bench", *sys.argv[1:]])


# Subcommands -----------------------------------------------------------------------------
def _load(args: argparse.Namespace, methods: tuple[str, ...] = (), grid: dict[str, Any] | None = None) -> Any:
    """The validated recipe of a run or grid command: its file (or the flags alone), --set, the flags."""
    return load_recipe(
        getattr(args, "recipe", None),
        {**_overrides(args.set), **_flag_overrides(args)},
        methods=methods,
        grid=grid,
        name=getattr(args, "experiment", None) or "cadence-bench-run",
    )


def cmd_run(args: argparse.Namespace) -> int:
    from cadence_harness.running.run import execute

    arm = method_names(_methods(args.methods))
    recipe = _load(args, arm)
    for spec in (RunSpec(leaf, arm, seed, label) for seed in recipe.seeds for label, leaf in leaf_recipes(recipe, arm)):
        result = execute(
            spec,
            tracking_uri=args.tracking_uri,
            data_dir=args.data_dir,
            download=args.download,
            progress_bar=not args.no_progress,
            tags={f"{TAG}command": _command()},
        )
        shown = {k.removeprefix("final/"): round(v, 4) for k, v in result.metrics.items()}
        print(f"{spec.run_name}: run {result.run_id} {shown}")
    return 0


def _grid_recipe(args: argparse.Namespace) -> Any:
    grid: dict[str, Any] = {}
    if args.methods:
        grid["methods"] = _methods(args.methods)
    if args.arms:
        grid["arms"] = _methods(args.arms)
    if args.combination:
        grid["combinations"] = [c.split("+") for c in args.combination]
    return _load(args, grid=grid)


def cmd_grid(args: argparse.Namespace) -> int:
    from cadence_harness.running.preflight import require_device

    if args.search:
        return _search(args)
    recipe = _grid_recipe(args)
    shard = parse_shard(args.shard)
    if args.dry_run or args.estimate:
        specs = select_shard(expand(recipe), *shard)
        for spec in specs:
            print(f"{spec.run_name:40s} {spec.config_hash}")
        print(f"{len(specs)} runs")
        if args.estimate:
            from cadence_harness.running.estimate import estimate_grid

            records = None if args.no_records else default_records_dir(args.records)
            print(estimate_grid(recipe, specs, data_dir=args.data_dir, download=args.download, rate=args.rate,
                                records_dir=records))  # fmt: skip
        try:
            require_device(recipe.device)
        except RecipeError as error:
            print(f"cadence-bench grid: warning: these runs would be refused on this machine: {error}", file=sys.stderr)
        return 0
    result = run_grid(
        recipe,
        tracking_uri=args.tracking_uri,
        shard=shard,
        rerun_finished=args.rerun_finished,
        log_dir=args.log_dir,
        data_dir=args.data_dir,
        download=args.download,
        timeout_s=args.timeout,
        command=_command(),
        jobs=args.jobs,
        records_dir=None if args.no_records else default_records_dir(args.records),
        isolate=args.isolate,
        time_limit_s=args.time_limit,
    )
    print(result.summary())
    for spec, reason in result.failed:
        print(f"FAILED {spec.run_name}: {reason.strip().splitlines()[-1] if reason.strip() else reason}")
    return 130 if result.interrupted else 1 if result.failed else 0  # 130: interrupted, as a shell says


def _search(args: argparse.Namespace) -> int:
    """``grid STUDY --search``: the runs the study's recipe search waits for, round after round."""
    from cadence_harness.search_grid import run_search

    given = [f for f in ("methods", "arms", "combination", "set", "estimate", "no_records") if getattr(args, f)]
    given += [*_flag_overrides(args), *(["shard"] if args.shard != "1/1" else [])]
    if given:
        drop = ", ".join(f"--{flag.replace('_', '-')}" for flag in given)
        raise RecipeError(f"`--search` runs what the search asks for with the study's own settings; drop {drop}")
    options = {"tracking_uri": args.tracking_uri, "log_dir": args.log_dir, "data_dir": args.data_dir, "jobs": args.jobs}
    options |= {"download": args.download, "timeout_s": args.timeout, "command": _command()}
    return run_search(
        args.recipe, records_dir=default_records_dir(args.records), run_grid=run_grid, dry_run=args.dry_run, **options
    )


def cmd_report(args: argparse.Namespace) -> int:
    from cadence_harness.reading.cards import write_cards, write_index
    from cadence_harness.reading.report import report_from_runs

    if args.cards and not args.study:
        raise RecipeError(
            "`--cards` writes the method cards only from a named study's committed run records, never from a local "
            "MLflow store: add --study NAME (method_cards/runs/NAME.jsonl, written by `cadence-bench grid NAME`)"
        )
    study: list[str] = []
    if args.study:
        study, runs, notes = studies_runs(args.study, default_records_dir(args.records))
        print("\n".join(notes))
        report = report_from_runs(runs, out_dir=args.out)
    else:
        records = [args.records] if args.records else None
        report = build_report(
            args.experiment or None, tracking_uri=args.tracking_uri, records=records, out_dir=args.out
        )
    print(report.markdown)
    print("\n".join(f"wrote {path}" for path in report.files))
    if args.cards:
        methods_root = Path(args.methods_root or REPO_ROOT / "packages" / "methods")
        index = Path(args.index or REPO_ROOT / "method_cards" / "INDEX.md")
        plots = [p for p in report.files if p.suffix == ".png"]
        common = {"methods_root": methods_root, "min_seeds": args.min_seeds, "sections": report.sections}
        cards = write_cards(report.summaries, **common, study=study, plots_dir=index.parent)
        print("\n".join(f"wrote the Results of {path}" for path in cards))
        index = write_index(report.summaries, **common, index_path=index, plots=plots, study=study)
        print(f"wrote {index}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    path = records_file(default_records_dir(args.records), args.experiment)
    added = export_runs(resolve_tracking_uri(args.tracking_uri), args.experiment, path)
    print(f"appended {len(added)} finished runs of {args.experiment!r} to {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from cadence_harness.demo import run_demo

    return run_demo(
        run_grid=run_grid, out_dir=args.out, tracking_uri=args.tracking_uri, data_dir=args.data_dir, rerun=args.rerun
    )


def cmd_methods(args: argparse.Namespace) -> int:
    from cadence.registry import registry

    reg = registry()
    for name, info in sorted(reg.methods.items()):
        signature = inspect.signature(info.algorithm.__init__)
        hyper = ", ".join(str(p) for n, p in signature.parameters.items() if n != "self")
        print(f"{name:24s} {info.algorithm.__name__}({hyper})")
    for name, reason in reg.broken.items():
        print(f"{name:24s} could not be loaded: {reason}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """One run of a grid (invoked by `run_grid` in a fresh process); exit 3 means out of memory."""
    from cadence_harness.running.runners import run_worker

    tags = dict(pair.split("=", 1) for pair in args.tag)
    options = {"data_dir": args.data_dir, "download": args.download, "microbatch_size": args.microbatch_size}
    return run_worker(
        Path(args.spec), tracking_uri=args.tracking_uri, tags=tags, run_id_file=args.run_id_file, **options
    )


# Parser ----------------------------------------------------------------------------------
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cadence-bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train one configuration (one or more seeds) in this process")
    run.add_argument("recipe", nargs="?", help="a recipe file or shipped recipe name (optional)")
    run.add_argument("--methods", help="comma-separated methods, e.g. mixup,label_smoothing")
    run.add_argument("--experiment", help="MLflow experiment when no recipe is given")
    run.add_argument("--no-progress", action="store_true")
    _recipe_flags(run)
    _common(run)
    run.set_defaults(func=cmd_run)

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
    grid.add_argument("--rerun-finished", action="store_true", help="run even configurations MLflow already has")
    grid.add_argument("--dry-run", action="store_true", help="list the runs and their config hashes, run nothing")
    grid.add_argument("--timeout", type=float, help="seconds before a run is killed and recorded failed (--isolate)")
    where = grid.add_mutually_exclusive_group()
    where.add_argument("--isolate", action="store_const", const=True, help="one process per run (default on CPU)")
    where.add_argument("--in-process", dest="isolate", action="store_const", const=False, help="(default on GPU)")
    grid.add_argument("--time-limit", type=float, metavar="S", help="start no run after S seconds (rerun to go on)")
    grid.add_argument("--log-dir", default="cadence_runs/logs", help="where each run's console output goes")
    grid.add_argument("--jobs", type=int, default=1, help="runs at once (default 1: concurrent runs distort timings)")
    grid.add_argument(
        "--estimate", action="store_true", help="list the runs, estimate their FLOPs and time; run nothing"
    )
    grid.add_argument(
        "--rate", type=float, help="with --estimate: GFLOP/s to assume (else the study's records, else here)"
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
    grid.set_defaults(func=cmd_grid)

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
    report.add_argument("--min-seeds", type=int, default=3, help="arms with fewer seeds stay out of the cards")
    report.add_argument("--methods-root", help=argparse.SUPPRESS)
    report.add_argument("--index", help=argparse.SUPPRESS)
    report.add_argument("--tracking-uri", help=TRACKING_HELP)
    report.set_defaults(func=cmd_report)

    demo = commands.add_parser("demo", help="a small CPU comparison on real data, in a few minutes")
    demo.add_argument("--out", default="cadence_runs/demo", help="folder for the table, plots and logs")
    demo.add_argument("--rerun", action="store_true", help="train again even if the demo's runs are in MLflow")
    _common(demo)
    demo.set_defaults(func=cmd_demo)

    export = commands.add_parser("export", help="append an experiment's finished MLflow runs to its run records")
    export.add_argument("experiment")
    export.add_argument("--records", help=RECORDS_HELP)
    export.add_argument("--tracking-uri", help=TRACKING_HELP)
    export.set_defaults(func=cmd_export)

    methods = commands.add_parser("methods", help="list the installed methods and their hyperparameters")
    methods.set_defaults(func=cmd_methods)

    worker = commands.add_parser("worker")  # internal: one grid run in its own process
    worker.add_argument("spec")
    worker.add_argument("--run-id-file")
    worker.add_argument("--microbatch-size", type=int)
    worker.add_argument("--tag", action="append", default=[])
    _common(worker)
    worker.set_defaults(func=cmd_worker)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; an input that cannot work is refused with one line on stderr and exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        check_data_dir(getattr(args, "data_dir", None))
        return args.func(args)
    except (RecipeError, NotApplicableError, RecordError, StudyError) as error:  # refused before anything trained
        print(f"cadence-bench {args.command}: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:  # a dataset that is not there: the message lists where we looked
        print(f"cadence-bench {args.command}: {error}", file=sys.stderr)
        return 2
