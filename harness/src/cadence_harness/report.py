"""Reports from MLflow: per-arm tables with 95% confidence intervals over seeds, and plots.

Runs are read back with `MlflowClient`. The seeds of one arm share a ``cadence.group_hash``;
each arm is compared with the baseline run of the same configuration (``cadence.baseline_hash``)
on the same seeds. See `cadence_harness.stats` for which interval is used where.
"""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadence_harness.runspec import TAG
from cadence_harness.stats import Interval, paired_bootstrap_ratio, paired_t_difference, t_interval
from cadence_harness.tracking import client, harness_experiments, search_runs

__all__ = ["ArmSummary", "RunRecord", "format_table", "load_records", "plot_curves", "plot_pareto", "summarize"]

ACCURACY_HISTORY = "metrics/eval/MulticlassAccuracy"
TRAIN_TIME_HISTORY = "time/train_s"


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    experiment: str
    arm: str
    seed: int
    group_hash: str
    baseline_hash: str
    metrics: dict[str, float]
    params: dict[str, str]
    command: str

    @classmethod
    def from_mlflow(cls, run: Any, experiment: str) -> RunRecord:
        tags = run.data.tags
        return cls(
            run_id=run.info.run_id,
            experiment=experiment,
            arm=tags.get(f"{TAG}arm", "?"),
            seed=int(tags.get(f"{TAG}seed", "-1")),
            group_hash=tags.get(f"{TAG}group_hash", ""),
            baseline_hash=tags.get(f"{TAG}baseline_hash", ""),
            metrics=dict(run.data.metrics),
            params=dict(run.data.params),
            command=tags.get(f"{TAG}command", ""),
        )


def load_records(mlflow_client: Any, experiments: Sequence[str] | None = None) -> list[RunRecord]:
    """Every finished harness run of `experiments` (default: every experiment holding harness runs)."""
    names = list(experiments) if experiments else harness_experiments(mlflow_client)
    records = []
    for name in names:
        records += [RunRecord.from_mlflow(run, name) for run in search_runs(mlflow_client, [name])]
    return records


@dataclass
class ArmSummary:
    experiment: str
    arm: str
    group_hash: str
    seeds: list[int]
    accuracy: Interval
    train_s: Interval
    wall_s: Interval
    samples_per_s: Interval
    peak_memory_mb: Interval
    time_to_target: Interval
    reached: int
    target: float | None
    accuracy_delta: Interval | None = None
    speedup: Interval | None = None
    speedup_to_target: Interval | None = None
    run_ids: list[str] = field(default_factory=list)
    command: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def methods(self) -> list[str]:
        return [] if self.arm == "baseline" else self.arm.split("+")


def _metric(records: Sequence[RunRecord], key: str) -> list[float]:
    return [r.metrics[key] for r in records if key in r.metrics and not math.isnan(r.metrics[key])]


def _target(records: Sequence[RunRecord]) -> float | None:
    value = records[0].params.get("target_accuracy", "None")
    return None if value in ("None", "") else float(value)


def _summarize_group(records: list[RunRecord]) -> ArmSummary:
    records = sorted(records, key=lambda r: r.seed)
    first = records[0]
    commands = Counter(r.command for r in records if r.command)
    return ArmSummary(
        experiment=first.experiment,
        arm=first.arm,
        group_hash=first.group_hash,
        seeds=[r.seed for r in records],
        accuracy=t_interval(_metric(records, "final/accuracy")),
        train_s=t_interval(_metric(records, "final/train_s")),
        wall_s=t_interval(_metric(records, "final/wall_s")),
        samples_per_s=t_interval(_metric(records, "final/samples_per_s")),
        peak_memory_mb=t_interval(_metric(records, "final/peak_memory_mb")),
        time_to_target=t_interval(_metric(records, "final/time_to_target_s")),
        reached=int(sum(_metric(records, "final/reached_target"))),
        target=_target(records),
        run_ids=[r.run_id for r in records],
        command=commands.most_common(1)[0][0] if commands else "",
        params=dict(first.params),
    )


def _paired(arm: list[RunRecord], base: list[RunRecord], key: str) -> tuple[list[float], list[float]]:
    """Values of `key` for the seeds both groups have (and both logged)."""
    by_seed = {r.seed: r.metrics.get(key) for r in base}
    pairs = [(r.metrics.get(key), by_seed.get(r.seed)) for r in arm]
    kept = [(a, b) for a, b in pairs if a is not None and b is not None]
    return [a for a, _ in kept], [b for _, b in kept]


def _compare(summary: ArmSummary, arm: list[RunRecord], base: list[RunRecord]) -> None:
    accuracy, base_accuracy = _paired(arm, base, "final/accuracy")
    if accuracy:
        summary.accuracy_delta = paired_t_difference(accuracy, base_accuracy)
    train, base_train = _paired(arm, base, "final/train_s")
    if train:
        summary.speedup = paired_bootstrap_ratio(base_train, train)
    reach, base_reach = _paired(arm, base, "final/time_to_target_s")
    if reach:
        summary.speedup_to_target = paired_bootstrap_ratio(base_reach, reach)


def summarize(records: Sequence[RunRecord]) -> list[ArmSummary]:
    """One summary per (experiment, arm configuration), each compared with its baseline; baseline first."""
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[record.group_hash].append(record)
    summaries = []
    for group in groups.values():
        summary = _summarize_group(group)
        base = groups.get(group[0].baseline_hash)
        if base is not None and summary.arm != "baseline":
            _compare(summary, group, base)
        summaries.append(summary)
    return sorted(summaries, key=lambda s: (s.experiment, s.arm != "baseline", len(s.methods), s.arm))


# Tables ---------------------------------------------------------------------------------
COLUMNS = [
    "arm",
    "seeds",
    "accuracy %",
    "Δ accuracy (pp)",
    "train time (s)",
    "speedup",
    "samples/s",
    "time to target (s)",
    "speedup to target",
    "peak memory (MB)",
]


def _row(s: ArmSummary) -> list[str]:
    reached = f"{s.time_to_target.format(digits=1)} ({s.reached}/{s.n})" if s.target is not None else "—"
    return [
        s.arm,
        str(s.n),
        s.accuracy.format(scale=100),
        s.accuracy_delta.format(scale=100) if s.accuracy_delta else "—",
        s.train_s.format(digits=1),
        s.speedup.format(suffix="x") if s.speedup else "—",
        s.samples_per_s.format(digits=0),
        reached if s.reached else ("not reached" if s.target is not None else "—"),
        s.speedup_to_target.format(suffix="x") if s.speedup_to_target else "—",
        s.peak_memory_mb.format(digits=0),
    ]


def format_table(summaries: Sequence[ArmSummary]) -> str:
    """A Markdown table (95% confidence intervals: ± for t-intervals, [low, high] for bootstrap speedups)."""
    rows = [COLUMNS, ["---"] * len(COLUMNS), *(_row(s) for s in summaries)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def describe(summaries: Sequence[ArmSummary]) -> str:
    """One line saying what was trained, where, for how long, and the target."""
    params = summaries[0].params
    target = summaries[0].target
    parts = [
        f"{params.get('model', '?')} on {params.get('data', '?')}"
        + (f" (first {params['subset']} training images)" if params.get("subset", "None") != "None" else ""),
        f"{params.get('duration', '?')} at batch {params.get('batch_size', '?')}",
        f"{params.get('device_name', '?')} ({params.get('precision', '?')})",
    ]
    if target is not None:
        parts.append(f"target accuracy {target:.0%}")
    return "; ".join(parts)


def write_csv(summaries: Sequence[ArmSummary], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "experiment",
                "arm",
                "n",
                "accuracy",
                "accuracy_low",
                "accuracy_high",
                "train_s",
                "speedup",
                "speedup_low",
                "speedup_high",
                "time_to_target_s",
                "reached",
                "run_ids",
            ]
        )
        for s in summaries:
            speedup = s.speedup or Interval(float("nan"), None, None, 0)
            writer.writerow(
                [
                    s.experiment,
                    s.arm,
                    s.n,
                    s.accuracy.mean,
                    s.accuracy.low,
                    s.accuracy.high,
                    s.train_s.mean,
                    speedup.mean,
                    speedup.low,
                    speedup.high,
                    s.time_to_target.mean,
                    s.reached,
                    " ".join(s.run_ids),
                ]
            )


# Plots ----------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colours(summaries: Sequence[ArmSummary]) -> dict[str, str]:
    """One colour per arm, the same in every plot; the baseline is black."""
    palette = _pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    arms = [s.arm for s in summaries if s.arm != "baseline"]
    return {"baseline": "black", **{arm: palette[i % len(palette)] for i, arm in enumerate(arms)}}


def _finish(fig: Any, ax: Any, title: str, path: Path) -> Path:
    import textwrap

    ax.set_title(textwrap.fill(title, 80), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both time (lower) and accuracy (higher), by time."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def plot_pareto(summaries: Sequence[ArmSummary], path: Path, title: str) -> Path:
    """Final accuracy against training time, with 95% intervals and the Pareto front."""
    plt = _pyplot()
    shown = [s for s in summaries if not math.isnan(s.accuracy.mean) and not math.isnan(s.train_s.mean)]
    fig, ax = plt.subplots(figsize=(7, 5))
    colours = _colours(summaries)
    points = [(s.train_s.mean, s.accuracy.mean * 100) for s in shown]
    for s, (x, y) in zip(shown, points):
        xerr = [[x - s.train_s.low], [s.train_s.high - x]] if s.train_s.low is not None else None
        yerr = [[y - s.accuracy.low * 100], [s.accuracy.high * 100 - y]] if s.accuracy.low is not None else None
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3, color=colours[s.arm])
        ax.annotate(s.arm, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = pareto_front(points)
    if front:
        xs, ys = [points[i][0] for i in front], [points[i][1] for i in front]
        ax.step(xs, ys, where="post", color="grey", alpha=0.5, label="Pareto front")
        ax.legend(loc="best")
    ax.set_xlabel("training time (s), excluding evaluation")
    ax.set_ylabel("final accuracy (%)")
    return _finish(fig, ax, title, path)


def accuracy_curves(mlflow_client: Any, run_id: str) -> tuple[list[float], list[float]]:
    """(training seconds, eval accuracy) at each evaluation of a run, joined on the step."""
    accuracy = {m.step: m.value for m in mlflow_client.get_metric_history(run_id, ACCURACY_HISTORY)}
    seconds = {m.step: m.value for m in mlflow_client.get_metric_history(run_id, TRAIN_TIME_HISTORY)}
    steps = sorted(accuracy.keys() & seconds.keys())
    return [seconds[s] for s in steps], [accuracy[s] for s in steps]


def plot_curves(mlflow_client: Any, summaries: Sequence[ArmSummary], path: Path, title: str) -> Path:
    """Accuracy against training time for every run, one colour per arm."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    colours = _colours(summaries)
    for summary in summaries:
        colour = colours[summary.arm]
        for number, run_id in enumerate(summary.run_ids):
            x, y = accuracy_curves(mlflow_client, run_id)
            label = summary.arm if number == 0 else None
            ax.plot(x, [v * 100 for v in y], marker=".", color=colour, alpha=0.7, label=label)
    if summaries and summaries[0].target is not None:
        ax.axhline(summaries[0].target * 100, linestyle="--", color="grey", linewidth=1, label="target")
    ax.set_xlabel("training time (s), excluding evaluation")
    ax.set_ylabel("eval accuracy (%)")
    ax.legend(fontsize=8)
    return _finish(fig, ax, title, path)


# The whole report -----------------------------------------------------------------------
@dataclass
class Report:
    summaries: list[ArmSummary]
    markdown: str
    files: list[Path]


def by_experiment(summaries: Sequence[ArmSummary]) -> dict[str, list[ArmSummary]]:
    grouped: dict[str, list[ArmSummary]] = defaultdict(list)
    for summary in summaries:
        grouped[summary.experiment].append(summary)
    return dict(grouped)


def build_report(
    experiments: Sequence[str] | None = None,
    *,
    tracking_uri: str | None = None,
    out_dir: str | Path = "cadence_runs/report",
    plots: bool = True,
) -> Report:
    """Tables (Markdown and CSV) and plots for every experiment, written under `out_dir`."""
    mlflow_client = client(tracking_uri)
    summaries = summarize(load_records(mlflow_client, experiments))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    sections = []
    for experiment, rows in by_experiment(summaries).items():
        title = f"{experiment}: {describe(rows)}"
        sections.append(f"## {experiment}\n\n{describe(rows)}\n\n{format_table(rows)}\n")
        if rows[0].command:
            sections.append(f"Reproduce: `{rows[0].command}`\n")
        if plots:
            files.append(plot_pareto(rows, out / f"{experiment}-pareto.png", title))
            files.append(plot_curves(mlflow_client, rows, out / f"{experiment}-curves.png", title))
    markdown = "# cadence-bench report\n\n" + ("\n".join(sections) if sections else "No finished runs found.\n")
    (out / "report.md").write_text(markdown)
    write_csv(summaries, out / "summary.csv")
    files += [out / "report.md", out / "summary.csv"]
    return Report(summaries, markdown, files)
