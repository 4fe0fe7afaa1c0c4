"""Grids: expand a recipe into runs, run them, skip what MLflow already has.

Two ways to run them. *Isolated* (the default on CPU, ``--isolate``): one process per run (as timm's
``bulk_runner``), so a crash, a hang (``--timeout``) or an out-of-memory error ends that run only; it
becomes a FAILED MLflow run with the error and the worker's log, and the grid goes on. *In process*
(the default on a GPU): the runs one after another in the grid's process, the data decoded once and
resident on the device (`cadence_harness.running.resident`), no interpreter, import or CUDA start-up per run:
a run of a few seconds costs a few seconds. Each run seeds everything itself, so both ways give the
same results (a test compares them bitwise on CPU); a failing run is recorded FAILED and the grid goes
on, but a crash of the process (or a CUDA error that poisons its context) ends the grid: rerun it,
or use ``--isolate``. A finished run is found in MLflow by its configuration hash and skipped, so
rerunning a grid resumes it (``--time-limit`` stops starting runs after that many seconds: a grid in
chunks; ``--rerun-elsewhere`` runs again what last ran on another machine, so that a study's times all come from
one), and ``--shard i/n`` splits it over machines that share one tracking server. After an
out-of-memory error the run is retried with half the microbatch size (gradient accumulation keeps
the batch the same).
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cadence.termination import RunTerminated, sigterm_raises
from cadence_harness.records import TAG, records_file
from cadence_harness.running.bridge import export_runs, import_records
from cadence_harness.running.environment_check import mismatch as environment_mismatch
from cadence_harness.running.membership import StudyMembership
from cadence_harness.running.plan import expand
from cadence_harness.running.preflight import check_applicable, check_arm_composition, require_device, sample_batch
from cadence_harness.running.provenance import environment_on, machine_on
from cadence_harness.running.recipe import Recipe, RecipeError
from cadence_harness.running.runners import (
    KILLED,
    Interruption,
    run_one_in_process,
    run_one_in_subprocess,
    sigint_reaches_workers,
    warm_up_process,
    worker_threads,
)
from cadence_harness.running.runspec import RunSpec, config_hash
from cadence_harness.running.scale_out import check_shares, require_processes
from cadence_harness.running.tracking import finished_config_hashes, finished_machines, resolve_tracking_uri

__all__ = ["GridResult", "check_arms", "check_in_process", "parse_shard", "run_grid", "select_shard"]

_NOT_STARTED = "not started: the grid's time limit had passed"


def check_arms(recipe: Recipe, specs: list[RunSpec], data_dir: str | None = None, download: bool = False) -> None:
    """Before any worker starts: every method of the runs' arms works on the model and batches they will see.

    The recipe's model and data are built here, on the CPU, by the same functions as a worker's
    (the batches have the same structure, dtype and keys; a missing dataset is found here too), and
    each method is asked once, through the instance validation built. A run of ``nproc`` processes is asked
    whether its data can be shared among them (`scale_out.check_shares`).
    """
    from cadence_harness.running.run import build_data, build_model

    if not specs:
        return
    for arm in dict.fromkeys(spec.arm for spec in specs):  # conflicting methods: refused before data is built
        check_arm_composition(arm, [recipe.algorithm(name) for name in arm])
    arms: dict[str, list[str]] = {}  # method -> the arms that use it
    for spec in specs:
        for name in spec.arm:
            if spec.arm_name not in arms.setdefault(name, []):
                arms[name].append(spec.arm_name)
    cpu = torch.device("cpu")
    data = build_data(recipe, specs[0].seed, cpu, data_dir, download)
    check_shares(recipe.nproc, data.train, data.eval, recipe.subset, recipe.eval_subset)  # before torchrun starts
    batch = sample_batch(data.train, data.eval, cpu)
    check_applicable(((name, recipe.algorithm(name)) for name in arms), build_model(recipe, data), batch, arms)


def check_in_process(isolate: bool | None, timeout_s: float | None, jobs: int) -> None:
    """Refuse ``--in-process`` with what only a process per run can do (``isolate`` False: asked for in-process):
    a run is timed out by killing its process, and runs at once need a process each. The command line asks
    this before anything runs (a ``--search`` too), `run_grid` again for its other callers."""
    given = ([f"--timeout {timeout_s:g}"] if timeout_s is not None else []) + ([f"--jobs {jobs}"] if jobs > 1 else [])
    if isolate is False and given:
        drop = " and ".join(flag.split()[0] for flag in given)
        raise RecipeError(
            f"`--in-process` with {' and '.join(given)}: in-process runs cannot be timed out or run in parallel "
            f"(this one process runs them one after another); drop {drop}, or --in-process"
        )


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` → (2, 3): the second of three shards (1-based)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise RecipeError(f"`--shard` = {text!r}: write i/n, e.g. 1/2 for the first of two machines") from None
    if not 1 <= index <= count:
        raise RecipeError(f"`--shard` = {text!r}: i must be between 1 and n")
    return index, count


def select_shard(specs: list[RunSpec], index: int, count: int) -> list[RunSpec]:
    """Round-robin share of shard `index` of `count`; deterministic for a given recipe."""
    return specs[index - 1 :: count]


@dataclass
class GridResult:
    planned: int = 0
    skipped: list[RunSpec] = field(default_factory=list)
    finished: list[RunSpec] = field(default_factory=list)
    failed: list[tuple[RunSpec, str]] = field(default_factory=list)
    not_started: list[RunSpec] = field(default_factory=list)  # left for the next call (time limit, Ctrl-C)
    killed: list[RunSpec] = field(default_factory=list)  # running when the grid was interrupted: recorded KILLED
    interrupted: int = 0  # the exit code of the signal that stopped the grid (130 Ctrl-C, 143 SIGTERM), else 0

    def summary(self) -> str:
        if self.interrupted:
            return (
                f"interrupted: {len(self.finished)} runs finished now, {len(self.killed)} killed (recorded KILLED), "
                f"{len(self.failed)} failed, {len(self.not_started)} not started; run the same command again to resume"
            )
        text = (
            f"{self.planned} runs planned: {len(self.skipped)} already finished (skipped), "
            f"{len(self.finished)} finished now, {len(self.failed)} failed"
        )
        if self.not_started:
            text += f", {len(self.not_started)} not started (time limit; run the same command again to go on)"
        return text


def grid_tags(recipe: Recipe, specs: list[RunSpec], command: str) -> dict[str, str]:
    """Tags every run of this grid carries: its membership (stable across reruns) and the command."""
    membership = config_hash({"recipe": recipe.name, "runs": sorted(s.config_hash for s in specs)})
    return {f"{TAG}grid": f"{recipe.name}:{membership}", f"{TAG}command": command}


def _here(recipe: Recipe) -> dict[str, str]:
    """This machine's environment as a run of `recipe` would record it."""
    return environment_on(recipe.device)


def run_grid(
    recipe: Recipe,
    *,
    tracking_uri: str | None = None,
    shard: tuple[int, int] = (1, 1),
    rerun_finished: bool = False,
    rerun_elsewhere: bool = False,
    log_dir: str | Path = "cadence_runs/logs",
    data_dir: str | None = None,
    download: bool = False,
    timeout_s: float | None = None,
    command: str | None = None,
    progress: bool = True,
    jobs: int = 1,
    records_dir: str | Path | None = None,
    isolate: bool | None = None,
    time_limit_s: float | None = None,
) -> GridResult:
    """Run the grid of `recipe` (this machine's shard of it); finished runs in MLflow are skipped.

    With `records_dir` (the CLI's default: the repository's ``method_cards/runs``), the records in
    ``<records_dir>/<experiment>.jsonl`` are first imported into the MLflow store (so their runs are
    skipped too, on any machine and in a fresh store); every run finished here is appended there as
    soon as it finishes, and so is every run of the grid the store held but the records lacked.

    Refused before any worker starts (`RecipeError`, `NotApplicableError`): ``device = "gpu"``
    without CUDA, a method that cannot work on the model or the batches (see `check_arms`).

    `jobs` runs that many worker processes at once. Keep it at 1 when the timings matter:
    concurrent runs share the CPU (and GPU) and slow each other down.

    `isolate`: one process per run (True) or every run in this process (False); None chooses in-process
    on a GPU and isolation on CPU. A recipe's ``nproc`` > 1 runs each run as a torchrun job (isolated).
    `timeout_s` and `jobs` > 1 need processes, so they isolate.
    `time_limit_s`: no run starts once that many seconds have passed (the rest stay for the next call).
    `rerun_elsewhere`: run again each configuration whose newest finished run ran on another machine
    (`records.machine_name`): times compare only within one machine, so this brings a study onto this one; the
    new run supersedes the old in the reading (`records.latest_per_config`), and the old stays in the records.
    """
    if rerun_finished and rerun_elsewhere:
        raise ValueError("rerun_finished reruns every configuration already; drop rerun_elsewhere or rerun_finished")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an int >= 1")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ValueError(f"time_limit_s={time_limit_s!r} must be > 0 seconds")
    if recipe.nproc > 1 and isolate is False:
        raise RecipeError(
            f"`nproc` = {recipe.nproc}: each run is a torchrun job of {recipe.nproc} processes, which an in-process "
            "grid cannot start; drop --in-process (runs with --nproc are isolated) or --nproc"
        )
    if recipe.nproc > 1 and recipe.device == "gpu" and jobs > 1:
        raise RecipeError(f"`--jobs` = {jobs} with --nproc {recipe.nproc} on GPUs: every job would take GPUs 0 to "
                          f"{recipe.nproc - 1}; drop --jobs")  # fmt: skip
    check_in_process(isolate, timeout_s, jobs)
    if isolate is None:
        isolate = recipe.device != "gpu" or timeout_s is not None or jobs > 1 or recipe.nproc > 1
    from tqdm.auto import tqdm

    require_device(recipe.device)
    require_processes(recipe.nproc, recipe.device)
    specs = expand(recipe)
    mine = select_shard(specs, *shard)
    check_arms(recipe, mine, data_dir, download)  # before anything is written anywhere
    uri = resolve_tracking_uri(tracking_uri)
    tags = grid_tags(recipe, specs, command or shlex.join(["cadence-bench", *sys.argv[1:]]))
    membership = StudyMembership(recipe.source or recipe.name)  # each record says if, and how, it is in the study
    records = records_file(records_dir, recipe.name) if records_dir is not None else None
    if records is not None and records.is_file():
        imported = import_records(uri, records)
        if imported and progress:
            print(f"imported {len(imported)} finished runs from {records} into {uri}")
    here = machine_on(recipe.device) if rerun_elsewhere else None
    last_ran_on = finished_machines(uri, recipe.name) if here is not None else {}
    if rerun_finished:
        done: set[str] = set()
    elif here is not None:
        done = {key for key, machine in last_ran_on.items() if machine == here}
    else:
        done = set(finished_config_hashes(uri, recipe.name))
    result = GridResult(planned=len(mine))
    todo: list[RunSpec] = []
    for spec in mine:
        (result.skipped if spec.config_hash in done else todo).append(spec)
    if progress and (again := sum(spec.config_hash in last_ran_on for spec in todo)):
        print(f"{again} of the {len(mine)} runs last ran on another machine; they run again on this one: {here}")
    if records is not None and (warning := environment_mismatch(records, _here(recipe), [s.config_hash for s in todo])):
        print(warning, file=sys.stderr)
    if records is not None and result.skipped:  # runs the store holds but the records lack (a run without them)
        added = export_runs(uri, recipe.name, records, config_hashes=[s.config_hash for s in result.skipped])
        if added and progress:
            print(f"recorded {len(added)} runs finished earlier in {records}")
    bar = tqdm(total=len(todo), desc=f"grid {recipe.name}", unit="run", disable=not progress, dynamic_ncols=True)

    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    if not isolate and todo and recipe.device == "gpu":  # one-time costs of the process, in no recorded run
        bar.write(f"  warmed up the process in {warm_up_process(todo[0], data_dir=data_dir, download=download):.1f} s")

    interruption = Interruption(worker_threads=worker_threads(jobs, recipe.device) if isolate else None)
    current: list[RunSpec] = []  # the run in this process, if any (in-process grids)

    def launch(spec: RunSpec) -> tuple[RunSpec, str | None, float]:
        if interruption.interrupted or (deadline is not None and time.monotonic() > deadline):
            return spec, _NOT_STARTED, 0.0
        started = time.perf_counter()
        run_tags = {**tags, **membership.tags(spec.config_hash, spec.arm_name, spec.recipe.duration, spec.seed)}
        if isolate:
            reason = run_one_in_subprocess(
                spec, uri=uri, log_dir=Path(log_dir), tags=run_tags, data_dir=data_dir, download=download,
                timeout_s=timeout_s, interruption=interruption,
            )  # fmt: skip
        else:
            current[:] = [spec]
            reason = run_one_in_process(spec, uri=uri, tags=run_tags, data_dir=data_dir, download=download)
            current.clear()
        return spec, reason, time.perf_counter() - started

    def counted(spec: RunSpec) -> bool:
        """Whether `spec`'s outcome is in the result. The result's lists are the only record of it: a Ctrl-C or
        SIGTERM may land between any two statements, and one append either happened or not."""
        done = [*result.finished, *result.killed, *result.not_started, *(s for s, _ in result.failed)]
        return any(s.config_hash == spec.config_hash for s in done)

    def record(spec: RunSpec, reason: str | None, elapsed: float) -> None:
        if counted(spec):
            return
        if reason is _NOT_STARTED:
            result.not_started.append(spec)
        elif reason is None:
            result.finished.append(spec)
            if records is not None:
                export_runs(uri, recipe.name, records, config_hashes=[spec.config_hash])
            bar.write(f"  finished {spec.run_name} in {elapsed:.1f} s")
        elif reason == KILLED:
            result.killed.append(spec)
        else:
            result.failed.append((spec, reason))
            last = reason.strip().splitlines()[-1] if reason.strip() else reason
            bar.write(f"  FAILED   {spec.run_name} after {elapsed:.0f} s: {last}")
        bar.update(1)

    with sigint_reaches_workers(), ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(launch, s) for s in todo] if isolate else []
        try:
            with sigterm_raises():  # kill PID, a scheduler's stop: as Ctrl-C (in-process runs see it as theirs)
                for spec, reason, elapsed in (
                    (f.result() for f in as_completed(futures)) if isolate else map(launch, todo)
                ):
                    record(spec, reason, elapsed)
        except (KeyboardInterrupt, RunTerminated) as stop:  # no run starts, running ones are recorded KILLED
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup
            try:
                result.interrupted = 128 + getattr(stop, "signum", signal.SIGINT)
                interruption.interrupt()
                for spec in current:  # in this process: the Trainer recorded it KILLED
                    record(spec, KILLED, 0.0)
                for future in futures:  # the workers record theirs KILLED and exit; the rest never start
                    record(*future.result())
                for spec in todo:
                    record(spec, _NOT_STARTED, 0.0)
                if records is not None:  # every run that finished, whatever the moment of the interrupt
                    export_runs(uri, recipe.name, records, config_hashes=[s.config_hash for s in todo])
            finally:
                signal.signal(signal.SIGINT, previous)
    bar.close()
    return result
