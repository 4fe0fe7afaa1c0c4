"""The report's text: section headers that claim only what every run shares, tables, and CSV files.

95% intervals, all Student-t: ``±`` on the values, ``[low, high]`` on the log scale (costs) or on the per-seed
log-ratios (ratios and speedups, with n). A ratio or speedup is printed only with its interval: with one
seed, not at all.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cadence.time import Time
from cadence_harness.reading.cyclic import cyclic_checks
from cadence_harness.reading.peaks import peak_of
from cadence_harness.reading.tradeoff import COSTS, pareto_points, verdict
from cadence_harness.stats import Interval

if TYPE_CHECKING:
    from cadence_harness.reading.summaries import ArmSummary, Section

__all__ = [
    "describe",
    "format_table",
    "peak_note",
    "tradeoff_markdown",
    "write_csv",
    "write_tradeoff_csv",
]

HOW_TO_READ_RATIOS = (
    "Time and FLOPs ratios compare runs of the same budget: the baseline's cost over the arm's (above 1: the arm's "
    "run is cheaper), not what reaching an accuracy costs; a ratio is shown only with its interval, never for one "
    "seed."
)


def _merged(summaries: Sequence[ArmSummary], key: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for summary in summaries:
        total.update(summary.settings.get(key, Counter({summary.params.get(key, "None"): summary.n})))
    return total


def _budget_order(duration: str) -> tuple[str, float, str]:
    """Budgets in the order they run ('2ep' before '16ep'), by unit then amount; text that is not a time last."""
    try:
        time = Time.from_input(duration)
    except (TypeError, ValueError):
        return ("~", math.inf, duration)
    return (time.unit.value, float(time.value), duration)


def describe(summaries: Sequence[ArmSummary]) -> str:
    """What was trained, for how long and where: a setting is stated only when all the runs share it."""
    if not summaries:
        return ""

    def one(key: str) -> str | None:
        values = _merged(summaries, key)
        return next(iter(values)) if len(values) == 1 else None

    model, data, subset = one("model") or "(several models)", one("data") or "(several datasets)", one("subset")
    samples = "texts" if model.startswith("hf/") else "images"
    model += _model_kwargs(summaries)
    what = f"{model} on {data}" + (f" (first {subset} training {samples})" if subset not in (None, "None") else "")
    durations = sorted(_merged(summaries, "duration"), key=_budget_order)
    budget = one("duration")
    batch = one("batch_size")
    length = f"{budget}" if budget else f"budgets {', '.join(durations)}"
    length += f" at batch {batch}" if batch else " (batch sizes differ)"
    machines = _merged(summaries, "device_name")
    precision = one("precision") or "several precisions"
    if len(machines) == 1:
        where = f"{next(iter(machines))} ({precision})"
    else:
        where = f"{len(machines)} machines: " + "; ".join(f"{m} ({n} runs)" for m, n in machines.most_common())
        where += f" ({precision})"
    parts = [what, length, where]
    targets = {s.target for s in summaries}
    if len(targets) == 1 and None not in targets:
        parts.append(f"target accuracy {next(iter(targets)):.0%}")
    return "; ".join(parts)


def _model_kwargs(summaries: Sequence[ArmSummary]) -> str:
    """`` (norm=groupnorm, dropout=0.5)``: the recipe's `model_kwargs` when every run shares them (a variant
    of the named model must not read as the stock one), else ``""``."""
    prefix = "model_kwargs."

    def kwargs_of(summary: ArmSummary) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k.removeprefix(prefix), v) for k, v in summary.params.items() if k.startswith(prefix)))

    shared = {kwargs_of(s) for s in summaries}
    kwargs = next(iter(shared)) if len(shared) == 1 else ()
    return f" ({', '.join(f'{k}={v}' for k, v in kwargs)})" if kwargs else ""


def _ratio(interval: Interval | None) -> str:
    if interval is None:
        return "—"
    if interval.n < 2 or interval.low is None:
        return "— (1 seed)"
    return interval.format(suffix="x")


def _target_ratio(interval: Interval | None, n: int) -> str:
    """The speedup to target; where a seed fell short of the target its ratio is a bound, so only the interval
    shows (`summaries.speedup_to_target`), and n wherever it is not the row's seeds."""
    if interval is None or not math.isnan(interval.mean):
        text = _ratio(interval)
        return text if interval is None or interval.n == n or text.startswith("—") else f"{text} n={interval.n}"
    if interval.low is None or interval.high is None or (interval.low == 0.0 and interval.high == math.inf):
        return "—"  # bounds that bound nothing: the time to target's column says how many seeds reached it
    ends = ", ".join("unbounded" if end in (0.0, math.inf) else f"{end:.2f}x" for end in (interval.low, interval.high))
    return f"[{ends}] n={interval.n} (bounds: a seed fell short of the target)"


def _tflops(interval: Interval) -> str:
    return "—" if interval.n == 0 else interval.format(scale=1e-12, digits=3)


def _percent(interval: Interval) -> str:
    return "—" if interval.n == 0 else interval.format(scale=100, digits=1)


def _row(s: ArmSummary, with_budget: bool, language: bool = False, throughput: bool = False) -> list[str]:
    reached = f"{s.time_to_target.format(digits=1)} ({s.reached}/{s.n})" if s.target is not None else "—"
    return [
        s.arm,
        *([s.budget_label] if with_budget else []),
        str(s.n),
        s.accuracy.format(scale=100),
        *([s.perplexity.format(digits=1) if s.perplexity.n else "—"] if language else []),
        s.accuracy_delta.format(scale=100) if s.accuracy_delta else "—",
        s.train_s.format(digits=1),
        s.cpu_s.format(digits=1) if s.cpu_s.n else "—",
        _tflops(s.flops),
        _ratio(s.speedup),
        _ratio(s.flops_ratio),
        s.samples_per_s.format(digits=0),
        *([_tflops(s.flops_per_s), _percent(s.peak_fraction)] if throughput else []),
        reached if s.reached else ("not reached" if s.target is not None else "—"),
        _target_ratio(s.speedup_to_target, s.n),
        s.peak_memory_mb.format(digits=0),
    ]


def format_table(summaries: Sequence[ArmSummary], throughput: bool = False) -> str:
    """One row per configuration (arm and, when it varies, budget); 95% intervals over seeds. With `throughput`,
    also each row's model TFLOP/s and its fraction of the device's peak (`peak_note` says which peak)."""
    with_budget = len({s.budget_label for s in summaries}) > 1
    language = any(s.perplexity.n for s in summaries)  # a language model: accuracy is next-token accuracy
    columns = [
        "arm",
        *(["budget"] if with_budget else []),
        "seeds",
        "next-token accuracy %" if language else "accuracy %",
        *(["perplexity"] if language else []),
        "Δ accuracy (pp)",
        "train time (s)",
        "CPU time (s)",
        "TFLOPs",
        "time ratio",
        "FLOPs ratio",
        "samples/s",
        *(["model TFLOP/s", "% of peak"] if throughput else []),
        "time to target (s)",
        "speedup to target",
        "peak memory (MB)",
    ]
    rows = [columns, ["---"] * len(columns), *(_row(s, with_budget, language, throughput) for s in summaries)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def peak_note(summaries: Sequence[ArmSummary]) -> str:
    """What the throughput columns mean and which device peak each fraction is of (`cadence_harness.reading.peaks`)."""
    pairs = sorted(
        {(d, p) for s in summaries for d in s.settings.get("device_name", {}) for p in s.settings.get("precision", {})}
    )
    known, unknown = [], set()
    for device, precision in pairs:
        peak = peak_of(device)
        value = peak.flops(precision) if peak is not None else None
        if peak is None or value is None:
            unknown.add(device)
        else:
            known.append(f"{device} in {precision}, {value / 1e12:,.0f} TFLOP/s ({peak.source})")
    parts = ["Model TFLOP/s: training FLOPs (as `FlopCounterMode` counts them) over training time, per run"]
    if known:
        parts.append("% of peak: of the device's dense peak in the run's precision: " + "; ".join(known))
    if unknown:
        devices = ", ".join(sorted(unknown))
        parts.append(f"% of peak: — for {devices}, whose peak is not known (`cadence_harness.reading.peaks`)")
    return ". ".join(parts) + "."


# Tradeoff ------------------------------------------------------------------------------------
HEADINGS = {"flops": "TFLOPs", "train_s": "train time (s)", "cpu_s": "CPU time (s)"}


def _cost(value: float, unit: str) -> str:
    return f"{value / 1e12:.3f} TFLOPs" if unit == "flops" else f"{value:.1f} s"


def tradeoff_markdown(section: Section) -> str:
    """Each arm's curve point by point, its speedups at matched accuracy, the verdicts, the Pareto front."""
    units = [u for u in COSTS if any(u in c.costs for c in section.curves)]
    head = [
        "arm",
        "budget",
        "seeds",
        "accuracy %",
        *(HEADINGS[u] for u in units),
        *(f"speedup ({COSTS[u]})" for u in units),
    ]
    lines = [
        "### Accuracy against cost",
        "",
        "Every arm's curve: final accuracy at each budget (mean, 95% t-interval over seeds) and what the budget cost. "
        "Speedup at matched accuracy: the cost the baseline's curve needs to reach the arm's accuracy (monotone, "
        "interpolated in log cost, never extrapolated) over the arm's cost, with a paired t-interval over seeds on "
        "the per-seed log speedups (n beside it) and its Benjamini-Hochberg q-value over all of the study's cells: "
        "a cell is better or worse only where q < 0.05. Points at the study's accuracy floor (every baseline seed "
        "at the same accuracy: a constant prediction) are left out. A cell reads `0.89x [0.74, 1.08] n=3, q=0.36`: "
        "the speedup of the mean curves, its 95% interval, the seeds paired, the q-value. *Beyond the baseline's "
        "range*: the arm's accuracy is below the baseline's shortest budget or above its best, so there is no point "
        "value, and an interval end shown as `beyond range` is open on that side (`[beyond range, 1.07]`: at most "
        "1.07x).",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] * len(head)) + " |",
    ]
    verdicts = []
    for curve in section.curves:
        speedups = {u: section.speedups_of(curve, u) for u in units}
        for j, budget in enumerate(curve.budgets):
            costs = [
                curve.cost_interval(u, j).format(digits=1) if u != "flops" else _tflops(curve.cost_interval(u, j))
                for u in units
            ]
            shown = []
            for u in units:
                if curve.arm == "baseline":
                    shown.append("(baseline)")
                else:
                    shown.append(speedups[u][j].format() if j < len(speedups[u]) else "— (no baseline curve)")
            row = [curve.label, budget, str(curve.n), curve.accuracy_interval(j).format(scale=100), *costs, *shown]
            lines.append("| " + " | ".join(row) + " |")
        if curve.arm != "baseline":
            verdicts.append([curve.label, *(verdict(speedups[u]) if speedups[u] else "—" for u in units)])
    partial = [
        f"{curve.label} {budget} ({seeds} seed{'s' if seeds != 1 else ''} so far)"
        for curve in section.curves
        for budget, seeds in curve.left_out.items()
    ]
    if partial:
        lines += ["", f"Left out of the curves until every seed has run them: {'; '.join(partial)}."]
    if verdicts:
        lines += ["", "### Against the baseline's curve", "", "| arm | " + " | ".join(COSTS[u] for u in units) + " |"]
        lines += [
            "| " + " | ".join(["---"] * (len(units) + 1)) + " |",
            *("| " + " | ".join(v) + " |" for v in verdicts),
        ]
    if section.noise_floor is not None:
        lines += ["", "### Timing noise floor", "", section.noise_floor.format()]
    lines += ["", "### Pareto front over all arms", ""]
    identities = set(section.noise_floor.arms) if section.noise_floor is not None else set()
    for unit in units:  # an identity arm's time is a re-timed baseline run: noise, not a point of its own
        front = pareto_points([c for c in section.curves if unit == "flops" or c.arm not in identities], unit)
        points = "; ".join(
            f"{arm} at {budget} ({acc * 100:.2f}%, {_cost(cost, unit)})" for arm, budget, cost, acc in front
        )
        lines.append(f"- {COSTS[unit]}: {points}")
    check = cyclic_checks(section.curves).get(section.family_hash)
    if check is not None:
        lines += ["", "### The cyclic curve against the sweep", "", check.format()]
    return "\n".join(lines) + "\n"


# CSV -------------------------------------------------------------------------------------------
def write_csv(summaries: Sequence[ArmSummary], path: Path) -> None:
    nan = Interval(float("nan"), None, None, 0)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["experiment", "arm", "budget", "n", "accuracy", "accuracy_low", "accuracy_high", "train_s", "cpu_s",
             "flops", "speedup", "speedup_low", "speedup_high", "time_to_target_s", "reached", "run_ids",
             "samples_per_s", "flops_per_s", "peak_fraction"]
        )  # fmt: skip
        for s in summaries:
            speedup = s.speedup if s.speedup is not None and s.speedup.n >= 2 else nan
            writer.writerow(
                [s.experiment, s.arm, s.budget_label, s.n, s.accuracy.mean, s.accuracy.low, s.accuracy.high,
                 s.train_s.mean, s.cpu_s.mean, s.flops.mean, speedup.mean, speedup.low, speedup.high,
                 s.time_to_target.mean, s.reached, " ".join(s.run_ids), s.samples_per_s.mean, s.flops_per_s.mean,
                 s.peak_fraction.mean if s.peak_fraction.n else ""]
            )  # fmt: skip


def write_tradeoff_csv(sections: Sequence[Section], path: Path) -> Path:
    """Every curve point with its speedups at matched accuracy (empty where there is no interval)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "experiment",
                "arm",
                "cyclic",
                "budget",
                "n",
                "accuracy",
                "unit",
                "cost",
                "speedup",
                "low",
                "high",
                "beyond",
            ]
        )
        for section in sections:
            for curve in section.curves:
                for unit in (u for u in COSTS if u in curve.costs):
                    speedups = section.speedups_of(curve, unit)
                    for j, budget in enumerate(curve.budgets):
                        s = speedups[j] if j < len(speedups) else None
                        value = s.value if s is not None and s.low is not None else None
                        writer.writerow(
                            [section.experiment, curve.arm, curve.cyclic, budget, curve.n, curve.accuracy[:, j].mean(),
                             unit, curve.costs[unit][:, j].mean(), _blank(value), _blank(s.low if s else None),
                             _blank(s.high if s else None), s.beyond if s else ""]
                        )  # fmt: skip
    return path


def _blank(value: float | None) -> str | float:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value
