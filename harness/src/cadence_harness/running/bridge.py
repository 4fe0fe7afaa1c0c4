"""The bridge between the MLflow store and the run records: a finished run becomes a record line, and a
record becomes a FINISHED MLflow run again (so a grid skips it in any store, a fresh one too).

The running wing logs to MLflow as runs train; `cadence_harness.records` is the form results take in
the repository. Only this module knows both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cadence_harness.records import EVAL_KEYS, TAG, RunRecord, append_records, latest_per_config, read_records
from cadence_harness.running.tracking import client, search_runs

__all__ = ["export_runs", "import_records", "load_mlflow_records", "record_from_mlflow"]


def _evals(mlflow_client: Any, run: Any) -> tuple[dict[str, float], ...]:
    """(step, accuracy, costs up to it) at each evaluation of a run, joined on the step."""
    histories = {}
    for name, key in EVAL_KEYS.items():
        if key in run.data.metrics:
            histories[name] = {m.step: m.value for m in mlflow_client.get_metric_history(run.info.run_id, key)}
    accuracy = histories.get("accuracy", {})
    points = []
    for step in sorted(accuracy):
        point = {"step": step, **{name: values[step] for name, values in histories.items() if step in values}}
        points.append(point)
    return tuple(points)


def record_from_mlflow(mlflow_client: Any, run: Any, experiment: str, evals: bool = True) -> RunRecord:
    return RunRecord(
        run_id=run.info.run_id,
        experiment=experiment,
        tags=dict(run.data.tags),
        params=dict(run.data.params),
        metrics=dict(run.data.metrics),
        evals=_evals(mlflow_client, run) if evals else (),
        end_time=int(run.info.end_time or 0),
        run_name=str(run.info.run_name or ""),
    )


def load_mlflow_records(mlflow_client: Any, experiments: Sequence[str]) -> list[RunRecord]:
    """Every finished harness run of `experiments`, with its evaluations."""
    records = []
    for name in experiments:
        records += [record_from_mlflow(mlflow_client, run, name) for run in search_runs(mlflow_client, [name])]
    return records


def export_runs(
    uri: str | None, experiment: str, path: str | Path, config_hashes: Sequence[str] | None = None
) -> list[str]:
    """Append the experiment's finished runs (of `config_hashes`, default all) that `path` lacks; returns their ids."""
    path = Path(path)
    known = {record.run_id for record in read_records([path])} if path.is_file() else set()
    mlflow_client = client(uri)
    wanted = None if config_hashes is None else set(config_hashes)
    runs = [
        run
        for run in search_runs(mlflow_client, [experiment])
        if (wanted is None or run.data.tags.get(f"{TAG}config_hash") in wanted)
        and run.data.tags.get(f"{TAG}record_run_id", run.info.run_id) not in known
    ]
    runs.sort(key=lambda run: (run.info.end_time or 0, run.info.run_id))
    append_records(path, (record_from_mlflow(mlflow_client, run, experiment) for run in runs))
    return [run.info.run_id for run in runs]


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def import_records(uri: str, path: str | Path) -> list[str]:
    """Create a FINISHED MLflow run for every record of `path` the store lacks; returns the new run ids.

    A run is known by its original id: an imported run carries it in ``cadence.record_run_id``, so
    importing twice, or exporting an imported run, adds nothing.
    """
    from mlflow.entities import Metric, Param

    mlflow_client = client(uri)
    records = latest_per_config(read_records([path]))
    created = []
    for experiment in sorted({record.experiment for record in records}):
        existing = mlflow_client.get_experiment_by_name(experiment)
        experiment_id = existing.experiment_id if existing is not None else mlflow_client.create_experiment(experiment)
        runs = search_runs(mlflow_client, [experiment], status=None)
        present = {run.info.run_id for run in runs} | {
            run.data.tags[f"{TAG}record_run_id"] for run in runs if f"{TAG}record_run_id" in run.data.tags
        }
        for record in (r for r in records if r.experiment == experiment and r.run_id not in present):
            tags = {**record.tags, f"{TAG}record_run_id": record.run_id, f"{TAG}imported_from": Path(path).name}
            name = record.run_name or f"{record.arm}-s{record.seed}"
            run = mlflow_client.create_run(experiment_id, run_name=name, tags=tags)
            run_id = run.info.run_id
            last = int(record.evals[-1]["step"]) if record.evals else 0
            stamp = record.end_time or 0
            metrics = [Metric(k, v, stamp, last) for k, v in record.metrics.items()]
            for point in record.evals:
                step = int(point["step"])
                metrics += [Metric(EVAL_KEYS[k], float(v), stamp, step) for k, v in point.items() if k in EVAL_KEYS]
            for chunk in _batches([Param(k, str(v)) for k, v in record.params.items()], 100):
                mlflow_client.log_batch(run_id, params=chunk)
            for chunk in _batches(metrics, 1000):
                mlflow_client.log_batch(run_id, metrics=chunk)
            mlflow_client.set_terminated(run_id, "FINISHED", end_time=record.end_time or None)
            created.append(run_id)
    return created
