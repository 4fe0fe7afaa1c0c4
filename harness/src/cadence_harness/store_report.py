"""A report of the runs in an MLflow store: export them to run records, then report the records.

The reading wing (`cadence_harness.reading`) reads run records only; this is where a store's runs
become records (`cadence_harness.running.bridge`), written next to the report so that it can be
rebuilt, and compared, without the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cadence_harness.reading.report import Report, report_from_records
from cadence_harness.records import records_file
from cadence_harness.running.bridge import export_runs
from cadence_harness.running.tracking import client, harness_experiments

__all__ = ["build_report", "export_store"]


def export_store(tracking_uri: str | None, experiments: Sequence[str] | None, records_dir: str | Path) -> list[Path]:
    """Write every finished harness run of `experiments` (default: every experiment holding harness runs) in
    the store at `tracking_uri` to ``<records_dir>/<experiment>.jsonl``, replacing what those files held;
    returns the files written (an experiment without finished runs writes none)."""
    names = list(experiments) if experiments else harness_experiments(client(tracking_uri))
    files = []
    for name in names:
        path = records_file(records_dir, name)
        path.unlink(missing_ok=True)  # the store's runs as they are now, not appended to an older export
        if export_runs(tracking_uri, name, path):
            files.append(path)
    return files


def build_report(
    experiments: Sequence[str] | None = None,
    *,
    tracking_uri: str | None = None,
    records: Sequence[str | Path] | None = None,
    out_dir: str | Path = "cadence_runs/report",
    plots: bool = True,
) -> Report:
    """Tables (Markdown and CSV) and plots for every experiment, written under `out_dir`.

    The runs come from the run-record files or folders `records` when given (MLflow is not touched),
    else from the MLflow store at `tracking_uri`, exported first to ``<out_dir>/records``.
    """
    if records is None:
        records = export_store(tracking_uri, experiments, Path(out_dir) / "records")
    return report_from_records(records, experiments, out_dir=out_dir, plots=plots)
