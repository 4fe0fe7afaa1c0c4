"""``cadence-bench``: run, grid, report, export, spread, demo, methods (and the grid's hidden worker); their arguments
are `cadence_harness.cli_parser`'s.

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

from cadence import NotApplicableError, distributed
from cadence_harness.cli_parser import UsageError, build_parser
from cadence_harness.reading.study import StudyError, experiment_runs, studies_runs
from cadence_harness.records import TAG, RecordError, default_records_dir, records_file
from cadence_harness.running.bridge import export_runs
from cadence_harness.running.budgets import leaf_recipes
from cadence_harness.running.data import REPO_ROOT, check_data_dir
from cadence_harness.running.grid import check_arms, check_in_process, parse_shard, run_grid, select_shard
from cadence_harness.running.plan import expand, swept_instead
from cadence_harness.running.recipe import RecipeError, load_recipe, method_names, parse_value, shipped_recipes
from cadence_harness.running.recipe_checks import DATASETS
from cadence_harness.running.runspec import RunSpec
from cadence_harness.running.tracking import resolve_tracking_uri
from cadence_harness.store_report import build_report, require_store_experiments

__all__ = ["main"]


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
        "nproc": args.nproc,
        "fsdp.sharding_strategy": args.fsdp,
    }
    return {key: value for key, value in flags.items() if value is not None}


def _methods(text: str | None) -> list[str]:
    return [m.strip() for m in text.split(",") if m.strip()] if text else []


def _command() -> str:
    """The command line as recorded with the runs, paste-able in any checkout: paths inside the repository, or in
    the project's ``../shared`` beside it (where its data lives), are written relative to its root (a run's
    records travel to other machines)."""

    def portable(word: str) -> str:
        if not Path(word).is_absolute():
            return word
        path = Path(word).resolve()
        if path.is_relative_to(REPO_ROOT):
            return str(path.relative_to(REPO_ROOT)) or "."
        if path.is_relative_to(REPO_ROOT.parent / "shared"):
            return str(Path("..") / path.relative_to(REPO_ROOT.parent))
        return word

    return shlex.join(["cadence-bench", *map(portable, sys.argv[1:])])


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
    from cadence_harness.running.preflight import require_device
    from cadence_harness.running.run import execute
    from cadence_harness.running.runners import run_launched, warm_up_process
    from cadence_harness.running.scale_out import require_processes

    arm = method_names(_methods(args.methods))
    recipe = _load(args, arm)
    require_device(recipe.device)  # no CUDA at all: that message first
    require_processes(recipe.nproc, recipe.device)
    specs = [RunSpec(leaf, arm, seed, label) for seed in recipe.seeds for label, leaf in leaf_recipes(recipe, arm)]
    if recipe.nproc > 1:  # the methods are asked here, as a grid does: a refusal starts no torchrun job
        check_arms(recipe, specs, args.data_dir, args.download)
    elif recipe.device == "gpu":  # as an in-process grid: CUDA's one-time costs land in no recorded run
        seconds = warm_up_process(specs[0], data_dir=args.data_dir, download=args.download)
        print(f"warmed up the process in {seconds:.1f} s (one unrecorded epoch)")
    for spec in specs:
        options = {"data_dir": args.data_dir, "download": args.download, "progress_bar": not args.no_progress}
        tags = {f"{TAG}command": _command()}
        if recipe.nproc == 1:
            result = execute(spec, tracking_uri=args.tracking_uri, tags=tags, **options)
        else:  # a torchrun job; rank 0 logs the run
            try:
                result = run_launched(spec, uri=resolve_tracking_uri(args.tracking_uri), tags=tags, **options)
            except RuntimeError as error:
                print(f"cadence-bench run: FAILED {error}", file=sys.stderr)
                return 1
        print(_run_line(spec, result))
    print(f"Browse: mlflow ui --backend-store-uri {resolve_tracking_uri(args.tracking_uri)}")
    return 0


def _run_line(spec: RunSpec, result: Any) -> str:
    """One finished run in words: accuracy, training time and FLOPs, where it is logged, what data it saw."""
    final = {k.removeprefix("final/"): v for k, v in result.metrics.items()}
    accuracy = f"accuracy {100 * final['accuracy']:.2f} %, " if "accuracy" in final else ""
    if "accuracy" in final and DATASETS.get(spec.recipe.data) == "detection":  # the quality a detector is read by
        accuracy = f"mAP@[.5:.95] {final['accuracy']:.4f}, "
    cost = f"{final.get('train_s', float('nan')):.1f} s of training, {final.get('flops', float('nan')):.3g} FLOPs"
    return f"{spec.run_name}: {accuracy}{cost}; MLflow run {result.run_id} in experiment '{spec.experiment}'; " + (
        f"data: {result.data_source}"
    )


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

    check_in_process(args.isolate, args.timeout, args.jobs)  # flags that contradict each other: before anything
    if args.rate is not None and not args.estimate:
        raise RecipeError(f"`--rate` = {args.rate:g}: only --estimate reads it; add --estimate, or drop --rate")
    if args.search:
        return _search(args)
    recipe = _grid_recipe(args)
    shard = parse_shard(args.shard)
    if note := swept_instead(recipe):
        print(f"cadence-bench grid: {note}", file=sys.stderr)
    if args.dry_run or args.estimate:
        specs = select_shard(expand(recipe), *shard)
        for spec in specs:
            print(f"{spec.run_name:40s} {spec.config_hash}")
        print(f"{len(specs)} runs")
        if args.estimate:
            from cadence_harness.running.estimate import estimate_grid
            from cadence_harness.running.provenance import machine_on

            records = None if args.no_records else default_records_dir(args.records)
            machine = machine_on(recipe.device) if args.rerun_elsewhere else None
            print(estimate_grid(recipe, specs, data_dir=args.data_dir, download=args.download, rate=args.rate,
                                records_dir=records, machine=machine))  # fmt: skip
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
        rerun_elsewhere=args.rerun_elsewhere,
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
    return result.interrupted or (1 if result.failed else 0)  # 130 after Ctrl-C, 143 after SIGTERM, as a shell says


def _search(args: argparse.Namespace) -> int:
    """``grid STUDY --search``: the runs the study's recipe search waits for, round after round."""
    from cadence_harness.search_grid import run_search

    flags = ("methods", "arms", "combination", "set", "estimate", "no_records", "rerun_finished", "rerun_elsewhere")
    given = [f for f in flags if getattr(args, f)]
    given += [*_flag_overrides(args), *(["shard"] if args.shard != "1/1" else [])]
    if given:
        drop = ", ".join(f"--{flag.split('.')[0].replace('_', '-')}" for flag in given)
        raise RecipeError(f"`--search` runs what the search asks for with the study's own settings; drop {drop}")
    options = {"tracking_uri": args.tracking_uri, "log_dir": args.log_dir, "data_dir": args.data_dir, "jobs": args.jobs}
    options |= {"download": args.download, "timeout_s": args.timeout, "command": _command(), "isolate": args.isolate}
    options |= {"time_limit_s": args.time_limit}
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
        study, runs, notes = studies_runs(args.study, default_records_dir(args.records), shipped_recipes())
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
    require_store_experiments(args.tracking_uri, [args.experiment], "`export`")  # else "appended 0 runs", exit 0
    path = records_file(default_records_dir(args.records), args.experiment)
    added = export_runs(resolve_tracking_uri(args.tracking_uri), args.experiment, path)
    print(f"appended {len(added)} finished runs of {args.experiment!r} to {path}")
    return 0


def cmd_spread(args: argparse.Namespace) -> int:
    """The reading side only: each experiment's run records, nothing from MLflow."""
    from cadence_harness.reading.spread import format_spreads, spreads

    folder, runs = default_records_dir(args.records), []
    for experiment in args.experiment:
        grid = experiment if experiment in shipped_recipes() else None  # the grid that writes its records
        runs += experiment_runs(experiment, folder, f"`spread` {experiment!r}", grid)[1]
    print(format_spreads(spreads(runs, min_seeds=args.min_seeds)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from cadence_harness.demo import run_demo

    return run_demo(
        run_grid=run_grid, out_dir=args.out, tracking_uri=args.tracking_uri, data_dir=args.data_dir, rerun=args.rerun,
        isolate=args.isolate,
    )  # fmt: skip


def cmd_methods(args: argparse.Namespace) -> int:
    """Each installed method: what it does (its card's tldr, else its class's first docstring line) and the
    hyperparameters it takes."""
    from cadence.registry import registry
    from cadence_harness.reading.cards import card_paths, front_matter

    reg, cards = registry(), card_paths(REPO_ROOT / "packages" / "methods")
    for name, info in sorted(reg.methods.items()):
        what = front_matter(cards[name]).get("tldr", "") if name in cards else ""
        what = what or (info.algorithm.__doc__ or "").strip().split("\n")[0]
        signature = inspect.signature(info.algorithm.__init__)
        hyper = ", ".join(str(p) for n, p in signature.parameters.items() if n != "self")
        print(f"{name}: {what}\n    {info.algorithm.__name__}({hyper})")
    for name, reason in reg.broken.items():
        print(f"{name}: could not be loaded: {reason}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """One run of a grid (invoked by `run_grid` in a fresh process); exit 3 means out of memory."""
    from cadence_harness.running.runners import run_worker

    tags = dict(pair.split("=", 1) for pair in args.tag)
    options = {"data_dir": args.data_dir, "download": args.download, "microbatch_size": args.microbatch_size}
    options["progress_bar"] = args.progress
    options |= {"tracking_uri": args.tracking_uri, "tags": tags, "run_id_file": args.run_id_file}
    code = run_worker(Path(args.spec), **options)
    if distributed.get_world_size() > 1:  # one of torchrun's processes: its finalisation can abort a finished run
        distributed.exit_without_finalization(code)
    return code


# Parser ----------------------------------------------------------------------------------
COMMANDS = {
    "run": cmd_run,
    "grid": cmd_grid,
    "report": cmd_report,
    "demo": cmd_demo,
    "export": cmd_export,
    "spread": cmd_spread,
    "methods": cmd_methods,
    "worker": cmd_worker,
}


def main(argv: list[str] | None = None) -> int:
    """Run a command; an input that cannot work is refused with one line on stderr and exit code 2."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:  # argparse's own refusals: a flag's value, a missing argument
        print(error, file=sys.stderr)
        return 2
    try:
        check_data_dir(getattr(args, "data_dir", None))
        return COMMANDS[args.command](args)
    except (RecipeError, NotApplicableError, RecordError, StudyError) as error:  # refused before anything trained
        print(f"cadence-bench {args.command}: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:  # a dataset that is not there: the message lists where we looked
        print(f"cadence-bench {args.command}: {error}", file=sys.stderr)
        return 2
