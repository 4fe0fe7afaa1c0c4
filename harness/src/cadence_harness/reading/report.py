"""Reports: per-configuration tables with 95% intervals over seeds, tradeoff curves, speedups, plots,
written from run records alone (`cadence_harness.records`; the summaries are
`cadence_harness.reading.summaries`). A report of runs in an MLflow store exports them to records
first (`cadence_harness.store_report`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cadence_harness.reading.combination_search import search_markdown
from cadence_harness.reading.commands import portable
from cadence_harness.reading.plots import plot_curves, plot_pareto, plot_prefix, plot_tradeoff, report_palette
from cadence_harness.reading.summaries import ArmSummary, Section, sections_of, summarize
from cadence_harness.reading.tables import (
    HOW_TO_READ_RATIOS,
    describe,
    format_table,
    peak_note,
    tradeoff_markdown,
    write_csv,
    write_tradeoff_csv,
)
from cadence_harness.reading.tradeoff import pareto_front
from cadence_harness.records import RunRecord, read_records

__all__ = [
    "ArmSummary",
    "Report",
    "RunRecord",
    "Section",
    "pareto_front",
    "report_from_records",
    "report_from_runs",
    "sections_of",
    "summarize",
]


# The whole report --------------------------------------------------------------------------
@dataclass
class Report:
    summaries: list[ArmSummary]
    markdown: str
    files: list[Path]
    sections: list[Section] = field(default_factory=list)


def write_plots(section: Section, sections: Sequence[Section], out: Path) -> list[Path]:
    """The section's plots under `out`, named `plot_prefix` + ``-pareto``, ``-curves``, ``-tradeoff``, each arm
    in its report-wide colour."""
    prefix, rows, palette = plot_prefix(section, sections), section.summaries, report_palette(sections)
    title = f"{section.name}: {describe(rows)}"
    files = [
        plot_pareto(rows, out / f"{prefix}-pareto.png", title, palette),
        plot_curves(section.records, out / f"{prefix}-curves.png", title, rows[0].target, palette),
    ]
    if section.has_tradeoff:
        files.append(plot_tradeoff(section.curves, out / f"{prefix}-tradeoff.png", title, palette=palette))
    return files


PLOT_TITLES = {"pareto": "accuracy against training time", "curves": "accuracy over training time"}
PLOT_TITLES["tradeoff"] = "accuracy against cost"


def plots_markdown(plots: Sequence[Path]) -> str:
    """The plots a section wrote, as links relative to ``report.md`` (they lie beside it)."""
    if not plots:
        return ""
    links = [f"[{PLOT_TITLES.get(p.stem.rsplit('-', 1)[-1], p.stem)}]({p.name})" for p in plots]
    return "Plots: " + ", ".join(links) + "."


def section_markdown(section: Section, plots: Sequence[Path] = ()) -> str:
    rows = section.summaries
    parts = [f"## {section.name}", "", describe(rows), "", format_table(rows, throughput=True), ""]
    parts += [HOW_TO_READ_RATIOS + " " + peak_note(rows), ""]
    commands = sorted({s.command for s in rows if s.command})
    parts += [f"Reproduce: `{portable(command)}`\n" for command in commands]
    if plots:
        parts += [plots_markdown(plots), ""]
    if section.has_tradeoff:
        parts.append(tradeoff_markdown(section))
        parts += ["", search_markdown(section)]
    return "\n".join(parts)


def report_from_records(
    records: Sequence[str | Path],
    experiments: Sequence[str] | None = None,
    *,
    out_dir: str | Path = "cadence_runs/report",
    plots: bool = True,
) -> Report:
    """Tables (Markdown and CSV) and plots of the runs in the record files or folders `records` (of
    `experiments` only, when given), written under `out_dir`."""
    runs = [r for r in read_records(records) if not experiments or r.experiment in experiments]
    return report_from_runs(runs, out_dir=out_dir, plots=plots)


def report_from_runs(
    runs: Sequence[RunRecord], *, out_dir: str | Path = "cadence_runs/report", plots: bool = True
) -> Report:
    """The report of `runs`, wherever they were read from."""
    summaries = summarize(runs)
    sections = sections_of(runs, summaries)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    drawn = {id(s): write_plots(s, sections, out) if plots else [] for s in sections}
    files += [path for section in sections for path in drawn[id(section)]]
    body = "\n".join(section_markdown(s, drawn[id(s)]) for s in sections)
    markdown = "# cadence-bench report\n\n" + (body if sections else "No finished runs found.\n")
    (out / "report.md").write_text(markdown)
    write_csv(summaries, out / "summary.csv")
    files += [out / "report.md", out / "summary.csv"]
    if any(s.has_tradeoff for s in sections):
        files.append(write_tradeoff_csv(sections, out / "tradeoff.csv"))
    return Report(summaries, markdown, files, sections)
