"""The spread of training time across seeds of one configuration, per machine and machine start.

Issue 27 asks for timing one can decide with: on a GPU, the seeds of one configuration within 3 % of each
other in training time. This reads that spread from run records (nothing else): for each group of runs that
differ only in their seed (the arm at one budget, ``group_hash``), on one machine (`same_machine`'s key) and
one machine start (the recorded ``boot_id``; for GPU records made before it was logged, inferred from pauses
between runs; CPU records without it form one start, "unrecorded"),
it gives the coefficient of variation of ``final/train_s`` with a 95 % interval and judges it against the
goal: *met* when the whole interval is at or below it, *missed* when the whole interval is above it, else
*inconclusive*. Five seeds cannot show a spread of 3 % is under 3 %; ten seeds of a steady configuration can.

Beside it, what moves the time, so that a spread can be traced to its cause:

* across the seeds: the coefficient of variation of the evaluation time (the same device work without the
  training loop's host: if it holds while training varies, the device ran steadily), and the correlation of the
  training time with the training thread's CPU time (near 1: the run is host-bound and the host ran the same
  instructions at different speeds; on one H200 start r = 0.99 with evaluation at 0.2 %,
  harness/measurements/2026-11-28-h200-timing.md). From these two, a *likely cause*: ``host speed`` (r >= 0.8
  and evaluation under a third of training's CV), ``device`` (evaluation varies at least half as much as
  training), else ``-``;
* for a compiled configuration, what its runs compiled (``final/compiled_graphs`` and the rest, recorded since
  2026-11-28's H200 runs computed the eager runs' accuracies to the last digit: torch 2.11 had never compiled
  them); a configuration whose runs compiled nothing is flagged;
* the slowest run: its training thread's CPU seconds per training second, its seconds in Python's garbage
  collector inside training, its host load, the share of the host's CPU stolen by the hypervisor, and on a GPU
  its lowest SM clock.

The interval: a chi-square interval for the standard deviation, ``s · sqrt((n-1) / chi2)``, divided by the mean.
It assumes normal noise and ignores the mean's own uncertainty (small beside the spread's for these sizes);
``harness/tests/test_spread.py`` checks by simulation that it covers 95 %.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cadence_harness.records import (
    EFFECTS_PARAM,
    MACHINE_PARAMS,
    RunRecord,
    budget_value,
    latest_per_config,
    same_machine,
)
from cadence_harness.stats import Interval

__all__ = ["GOAL", "Spread", "cv_interval", "format_spreads", "spreads"]

GOAL = 0.03  # issue 27: training time of one configuration's seeds within 3 %
UNRECORDED = "unrecorded"
HEADER = (
    "| arm | budget | n | median train s | CV | max/min | goal | eval CV | r: thread CPU | likely cause "
    "| slowest: cpu/train | gc s | load | steal | SM MHz |"
)
HOST_BOUND_R = 0.8  # training time this correlated with the training thread's CPU time: the host sets the pace
_NOT_SETTINGS = {"seed", "config_hash", "git_sha", *MACHINE_PARAMS}  # per run, machine or software: not settings
_NOT_PREFIXES = ("versions.", EFFECTS_PARAM)
START_GAP_S = 120.0  # GPU records without a boot_id: a longer pause between runs' ends is another machine start


def cv_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The coefficient of variation (sample standard deviation / mean) of positive values, with its interval."""
    from scipy.stats import chi2

    n = len(values)
    mean = statistics.fmean(values) if n else float("nan")
    if n < 2 or mean <= 0:
        return Interval(float("nan") if n < 2 else 0.0, None, None, n)
    cv = statistics.stdev(values) / mean
    tail = (1 - confidence) / 2
    low = cv * math.sqrt((n - 1) / chi2.ppf(1 - tail, n - 1))
    high = cv * math.sqrt((n - 1) / chi2.ppf(tail, n - 1))
    return Interval(cv, low, high, n)


@dataclass(frozen=True)
class Spread:
    """One configuration's seeds on one machine start."""

    machine: str
    start: str  # the machine start's boot_id (first 8 characters), or UNRECORDED
    arm: str
    budget: str
    train_s: tuple[float, ...]  # by seed
    cv: Interval
    slowest: RunRecord
    settings: str = ""  # what sets it apart from another configuration of the same arm and budget there
    eval_cv: float | None = None  # of final/eval_s across the seeds, where every run evaluated
    thread_cpu_r: float | None = None  # Pearson r of train_s with main_thread_cpu_s across the seeds
    compiled: str = ""  # a compiled configuration's graphs, graph breaks and CUDA-graph skips over its runs

    @property
    def likely_cause(self) -> str:
        """``host speed``, ``device`` or ``-`` (see the module docstring)."""
        if self.eval_cv is None or not self.cv.mean > 0:
            return "-"
        if self.eval_cv >= self.cv.mean / 2:
            return "device"
        if self.thread_cpu_r is not None and self.thread_cpu_r >= HOST_BOUND_R and self.eval_cv < self.cv.mean / 3:
            return "host speed"
        return "-"

    @property
    def verdict(self) -> str:
        if self.cv.low is None or self.cv.high is None:
            return "too few seeds"
        if self.cv.high <= GOAL:
            return "met"
        return "missed" if self.cv.low > GOAL else "inconclusive"


def _starts(runs: Sequence[RunRecord]) -> dict[str, str]:
    """Each run's machine start: its recorded ``boot_id``. A GPU run recorded without one is placed by time: a
    lent GPU machine runs a study's runs seconds apart, so a pause of more than `START_GAP_S` between two
    runs' ends starts a new one ("inferred 1", "inferred 2", ...). A CPU run without one is UNRECORDED (one CPU
    run can outlast the gap)."""
    starts: dict[str, str] = {}
    unrecorded_gpu = []
    for run in runs:
        boot = run.params.get("boot_id", "")
        if boot:
            starts[run.run_id] = boot[:8]
        elif run.params.get("device") == "gpu":
            unrecorded_gpu.append(run)
        else:
            starts[run.run_id] = UNRECORDED
    by_machine: dict[str, list[RunRecord]] = defaultdict(list)
    for run in unrecorded_gpu:
        by_machine[same_machine([run]) or "?"].append(run)
    for members in by_machine.values():
        members.sort(key=lambda run: run.end_time)
        start, previous = 1, None
        for run in members:
            if previous is not None and run.end_time - previous > START_GAP_S * 1000:
                start += 1
            starts[run.run_id], previous = f"inferred {start}", run.end_time
    return starts


def spreads(runs: Iterable[RunRecord], min_seeds: int = 3) -> list[Spread]:
    """Every group of at least `min_seeds` seeds of one configuration on one machine start, newest run per
    configuration; ordered by machine, start, arm and budget."""
    timed = [run for run in latest_per_config(runs) if run.metrics.get("final/train_s", 0) > 0]
    starts = _starts(timed)
    groups: dict[tuple[str, str, str], list[RunRecord]] = defaultdict(list)
    for run in timed:
        groups[(same_machine([run]) or "?", starts[run.run_id], run.group_hash or run.config_hash)].append(run)
    found = []
    for (machine, start, _), members in groups.items():
        if len(members) < min_seeds:
            continue
        members.sort(key=lambda run: run.seed)
        times = tuple(run.metrics["final/train_s"] for run in members)
        slowest = max(members, key=lambda run: run.metrics["final/train_s"])
        found.append(
            Spread(
                machine,
                start,
                members[0].arm,
                members[0].budget,
                times,
                cv_interval(times),
                slowest,
                eval_cv=_eval_cv(members),
                thread_cpu_r=_correlation(members, "final/main_thread_cpu_s"),
                compiled=_compiled(members),
            )
        )
    found = _named_apart(found)
    return sorted(found, key=lambda s: (s.machine, s.start, s.arm != "baseline", s.arm, budget_value(s.budget)))


def _eval_cv(members: Sequence[RunRecord]) -> float | None:
    values = [run.metrics.get("final/eval_s", 0.0) for run in members]
    return statistics.stdev(values) / statistics.fmean(values) if min(values) > 0 else None


def _compiled(members: Sequence[RunRecord]) -> str:
    """What a compiled configuration's runs compiled, summed over them ("" when not compiled). An in-process
    grid compiles in its first run and reuses the graphs, so the sum, not each run, must be above zero."""
    mode = members[0].params.get("compile", "False")
    if mode in ("False", "false", ""):
        return ""
    if any("final/compiled_graphs" not in run.metrics for run in members):
        torch_version = members[0].params.get("versions.torch", "")
        if torch_version and _older_than_2_14(torch_version):
            return (
                f"compile={mode}, torch {torch_version}: NOTHING WAS COMPILED, these timings are eager (before "
                "2026-11-28 the FLOP-counted first step kept the forward eager for good on torch < 2.14)"
            )
        return f"compile={mode}: what was compiled is not recorded (records before 2026-11-28)"
    total = {k: sum(run.metrics.get(f"final/{k}", 0.0) for run in members)
             for k in ("compiled_graphs", "graph_breaks", "cudagraph_skips", "compile_disabled")}  # fmt: skip
    note = (f"compile={mode}: {total['compiled_graphs']:.0f} graphs, {total['graph_breaks']:.0f} graph breaks, "
            f"{total['cudagraph_skips']:.0f} CUDA-graph skips over {len(members)} runs")  # fmt: skip
    if total["compile_disabled"] or not total["compiled_graphs"]:
        note += " - NOTHING WAS COMPILED: these timings are eager"
    return note


def _older_than_2_14(version: str) -> bool:
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < (2, 14)


def _correlation(members: Sequence[RunRecord], metric: str) -> float | None:
    """Pearson r of the runs' training times with `metric`; None where a run lacks it or either is constant."""
    values = [run.metrics.get(metric) for run in members]
    if any(value is None for value in values):
        return None
    times = [run.metrics["final/train_s"] for run in members]
    try:
        return statistics.correlation(times, values)  # type: ignore[arg-type]
    except statistics.StatisticsError:  # a constant column
        return None


def _named_apart(found: list[Spread]) -> list[Spread]:
    """Configurations of one arm and budget on one start (e.g. eager and compiled) get the params that differ."""
    alike: dict[tuple[str, str, str, str], list[Spread]] = defaultdict(list)
    for spread in found:
        alike[(spread.machine, spread.start, spread.arm, spread.budget)].append(spread)
    named = []
    for spreads_alike in alike.values():
        params = [s.slowest.params for s in spreads_alike]
        # a method's declaration (EFFECTS_PARAM) follows from its settings: not a setting of its own
        keys = sorted(k for k in {k for p in params for k in p} - _NOT_SETTINGS if not k.startswith(_NOT_PREFIXES))
        differing = [k for k in keys if len({p.get(k) for p in params}) > 1]
        for spread, values in zip(spreads_alike, params, strict=True):
            settings = ", ".join(f"{k}={values.get(k, '-')}" for k in differing)
            if len(spreads_alike) > 1 and not settings:  # only the software differs: name the configuration
                settings = f"configuration {spread.slowest.group_hash[:8]}"
            named.append(dataclasses.replace(spread, settings=settings))
    return named


def _cause(run: RunRecord) -> str:
    final = run.metrics
    parts = []
    if final.get("final/main_thread_cpu_s") and final.get("final/train_s"):
        parts.append(f"{final['final/main_thread_cpu_s'] / final['final/train_s']:.2f}")
    else:
        parts.append("-")
    parts.append(f"{final['final/gc_s']:.3f}" if "final/gc_s" in final else "-")
    parts.append(f"{final['final/host_load']:.2f}" if "final/host_load" in final else "-")
    parts.append(f"{final['final/host_steal_frac']:.1%}" if "final/host_steal_frac" in final else "-")
    parts.append(f"{final['final/gpu_sm_clock_min_mhz']:.0f}" if "final/gpu_sm_clock_min_mhz" in final else "-")
    return " | ".join(parts)


def format_spreads(found: Sequence[Spread]) -> str:
    """A markdown table per machine start and a closing count against the goal."""
    if not found:
        return "No configuration has 3 or more seeds on one machine start."
    lines = [
        f"Training time across seeds of one configuration (goal: coefficient of variation <= {GOAL:.0%}; "
        "95 % interval; across the seeds: evaluation time's CV and the correlation of training time with the "
        "training thread's CPU time; the slowest run's training-thread CPU s per training s, gc s in training, "
        "host load, CPU share stolen by the hypervisor, lowest SM MHz)",
    ]
    by_start: dict[tuple[str, str], list[Spread]] = defaultdict(list)
    for spread in found:
        by_start[(spread.machine, spread.start)].append(spread)
    for (machine, start), rows in by_start.items():
        lines += ["", f"### {machine}, machine start {start}", ""]
        lines += [HEADER, "|---" * HEADER.count(" | ") + "|---|"]
        for s in rows:
            cv = s.cv.format(scale=100, digits=1, suffix=" %")
            ratio = max(s.train_s) / min(s.train_s)
            median = statistics.median(s.train_s)
            arm = f"{s.arm} ({s.settings})" if s.settings else s.arm
            eval_cv = f"{s.eval_cv:.1%}" if s.eval_cv is not None else "-"
            r = f"{s.thread_cpu_r:.2f}" if s.thread_cpu_r is not None else "-"
            lines.append(
                f"| {arm} | {s.budget} | {s.cv.n} | {median:.2f} | {cv} | {ratio:.3f} | {s.verdict} | {eval_cv} | {r} "
                f"| {s.likely_cause} | {_cause(s.slowest)} |"
            )
        lines += [f"- {s.arm}, {s.budget}: {s.compiled}" for s in rows if s.compiled]
    counts = {verdict: sum(s.verdict == verdict for s in found) for verdict in ("met", "inconclusive", "missed")}
    median_cv = statistics.median(s.cv.mean for s in found)
    lines += [
        "",
        f"{len(found)} configurations: goal met {counts['met']}, inconclusive {counts['inconclusive']}, missed "
        f"{counts['missed']}; median CV {median_cv:.1%}.",
    ]
    host_speed = sum(s.likely_cause == "host speed" for s in found)
    if host_speed:
        lines.append(
            f"{host_speed} of them host-bound on a host of varying speed: training time follows the training "
            "thread's CPU time for the same work while evaluation holds. Only a step whose host work is well "
            "below the device's (CUDA graphs, fewer and larger kernels) hides that; the harness cannot remove it."
        )
    return "\n".join(lines)
