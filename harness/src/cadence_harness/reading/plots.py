"""The report's plots: arms at one budget (accuracy against time), accuracy over each run, tradeoff curves.

Every plot is drawn from run records (their final metrics and evaluations), so it needs no MLflow.
One colour per arm across every plot of a report (`report_palette`: the report's arms in name order, so an arm
keeps its colour however many arms a plot shows); the baseline is black. Error bars are 95% intervals over seeds.
File names are stable: the experiment, and where one experiment holds several families, what sets the family
apart in words (`plot_prefix`), never a hash.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadence_harness.reading.tradeoff import COSTS, Curve, pareto_front, pareto_points

if TYPE_CHECKING:
    from cadence_harness.reading.summaries import ArmSummary, Section
    from cadence_harness.records import RunRecord

__all__ = ["colours", "plot_curves", "plot_pareto", "plot_prefix", "plot_tradeoff", "report_palette"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colours(arms: Sequence[str]) -> dict[str, str]:
    """One colour per arm, the same in every plot; the baseline is black."""
    palette = _pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    others = [arm for arm in dict.fromkeys(arms) if arm != "baseline"]
    return {"baseline": "black", **{arm: palette[i % len(palette)] for i, arm in enumerate(others)}}


def report_palette(sections: Sequence[Section]) -> dict[str, str]:
    """The colour of every arm of a report's sections, fixed before any plot is drawn."""
    arms = {s.arm for section in sections for s in section.summaries}
    arms |= {c.arm for section in sections for c in section.curves}
    return colours(sorted(arms))


def plot_prefix(section: Section, sections: Sequence[Section]) -> str:
    """File-name prefix of a section's plots: the experiment; where the experiment holds several families, its
    largest keeps that name and each other adds what sets it apart (``study-model-tv-resnet20``, from the
    section's name), or its rank by size (``study-family-2``) where only a hash would."""
    family = sorted(
        (s for s in sections if s.experiment == section.experiment), key=lambda s: (-len(s.records), s.family_hash)
    )
    if len(family) < 2 or family[0].family_hash == section.family_hash:
        return section.experiment
    apart = section.name.removeprefix(section.experiment).strip(" ()")
    slug = "" if apart.startswith("configuration ") else re.sub(r"[^a-z0-9]+", "-", apart.lower()).strip("-")[:60]
    rank = next((i for i, s in enumerate(family, 1) if s.family_hash == section.family_hash), len(family) + 1)
    return f"{section.experiment}-{slug.strip('-') or f'family-{rank}'}"


def _palette(arms: Sequence[str], palette: Mapping[str, str] | None) -> Mapping[str, str]:
    """The report's colours, with any arm it lacks added after them."""
    given = dict(palette or {})
    missing = colours([a for a in arms if a not in given])
    extra = [c for c in missing.values() if c not in given.values()] or list(missing.values())
    for i, arm in enumerate(a for a in missing if a not in given):
        given[arm] = "black" if arm == "baseline" else extra[i % len(extra)]
    return given


def _finish(fig: Any, axes: Sequence[Any], title: str, path: Path) -> Path:
    axes[0].figure.suptitle(textwrap.fill(title, 90), fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def _errors(mean: float, low: float | None, high: float | None, scale: float = 1.0) -> Any:
    return None if low is None or high is None else [[(mean - low) * scale], [(high - mean) * scale]]


def plot_pareto(
    summaries: Sequence[ArmSummary], path: Path, title: str, palette: Mapping[str, str] | None = None
) -> Path:
    """Final accuracy against training time, one point per arm and budget, with the Pareto front."""
    plt = _pyplot()
    shown = [s for s in summaries if not math.isnan(s.accuracy.mean) and not math.isnan(s.train_s.mean)]
    fig, ax = plt.subplots(figsize=(7, 5))
    palette = _palette([s.arm for s in summaries], palette)
    points = [(s.train_s.mean, s.accuracy.mean * 100) for s in shown]
    for s, (x, y) in zip(shown, points):
        xerr = _errors(s.train_s.mean, s.train_s.low, s.train_s.high)
        yerr = _errors(s.accuracy.mean, s.accuracy.low, s.accuracy.high, 100)
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3, color=palette[s.arm])
        ax.annotate(s.label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = pareto_front(points)
    if front:
        xs, ys = [points[i][0] for i in front], [points[i][1] for i in front]
        ax.step(xs, ys, where="post", color="grey", alpha=0.5, label="Pareto front")
        ax.legend(loc="best")
    ax.set_xlabel("training time (s), excluding evaluation")
    ax.set_ylabel("final accuracy (%)")
    return _finish(fig, [ax], title, path)


def plot_curves(
    records: Sequence[RunRecord],
    path: Path,
    title: str,
    target: float | None = None,
    palette: Mapping[str, str] | None = None,
) -> Path:
    """Accuracy against training time at each evaluation of every run, one colour per arm."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    palette = _palette([r.arm for r in records], palette)
    labelled: set[str] = set()
    for record in sorted(records, key=lambda r: (r.arm != "baseline", r.arm, r.seed)):
        points = [p for p in record.evals if "train_s" in p and "accuracy" in p]
        label = record.arm if record.arm not in labelled else None
        labelled.add(record.arm)
        xs, ys = [p["train_s"] for p in points], [p["accuracy"] * 100 for p in points]
        ax.plot(xs, ys, marker=".", color=palette[record.arm], alpha=0.7, label=label)
    if target is not None:
        ax.axhline(target * 100, linestyle="--", color="grey", linewidth=1, label="target")
    ax.set_xlabel("training time (s), excluding evaluation")
    ax.set_ylabel("eval accuracy (%)")
    ax.legend(fontsize=8)
    return _finish(fig, [ax], title, path)


def plot_tradeoff(
    curves: Sequence[Curve],
    path: Path,
    title: str,
    units: Sequence[str] = ("flops", "train_s"),
    palette: Mapping[str, str] | None = None,
) -> Path:
    """Each arm's curve of final accuracy against cost (log axis), one panel per cost unit, mean and
    95% intervals over seeds; the grey steps are the Pareto front over all arms."""
    plt = _pyplot()
    shown = [u for u in units if any(u in c.costs for c in curves)] or ["train_s"]
    fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 5), squeeze=False)
    palette = _palette([c.arm for c in curves], palette)
    for ax, unit in zip(axes[0], shown):
        for curve in (c for c in curves if unit in c.costs):
            x = curve.costs[unit].mean(0)
            y = curve.accuracy.mean(0) * 100
            yerr: list[list[float]] = [[], []]
            for j in range(len(curve.budgets)):
                interval = curve.accuracy_interval(j)
                low = interval.low if interval.low is not None else interval.mean
                high = interval.high if interval.high is not None else interval.mean
                yerr[0].append((interval.mean - low) * 100)
                yerr[1].append((high - interval.mean) * 100)
            style = "--" if curve.cyclic else "-"
            ax.errorbar(x, y, yerr=yerr, fmt="o" + style, capsize=3, color=palette[curve.arm], label=curve.label)
        front = pareto_points(curves, unit)
        if front:
            ax.step([p[2] for p in front], [p[3] * 100 for p in front], where="post", color="grey", alpha=0.4)
        ax.set_xscale("log")
        ax.set_xlabel(f"{COSTS[unit]}" + (" (s)" if unit != "flops" else ""))
        ax.set_ylabel("final accuracy (%)")
        ax.legend(fontsize=7)
    return _finish(fig, list(axes[0]), title, path)
