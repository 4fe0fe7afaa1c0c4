"""Results that live in the repository: runs exported to one sorted JSON line each, reports built from
those files alone, a fresh MLflow store filled from them, and a grid that skips what they hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from cadence_harness import store_report
from cadence_harness.cli import main
from cadence_harness.records import read_records
from cadence_harness.running import grid as grid_module
from cadence_harness.running.bridge import export_runs, import_records
from cadence_harness.running.grid import run_grid
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import Recipe
from cadence_harness.running.tracking import finished_config_hashes, finished_machines
from cadence_harness.store_report import build_report

STUDY = Recipe(
    name="sweep",
    model="tv/resnet20",
    data="digits",
    duration="4ep",
    durations=("1ep", "2ep", "4ep"),
    schedule={"name": "cosine"},
    seeds=(0, 1, 2),
    methods={"fast": {}},
    grid={"arms": ["baseline", "each"]},
)
# (accuracy, cost) by arm and budget, logged by conftest's `log_study` (which varies them by seed)
KNOWN = {
    ("baseline", "1ep"): (0.60, 10.0),
    ("baseline", "2ep"): (0.70, 20.0),
    ("baseline", "4ep"): (0.75, 40.0),
    ("fast", "1ep"): (0.70, 10.0),
    ("fast", "2ep"): (0.74, 20.0),
    ("fast", "4ep"): (0.78, 40.0),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, study_logger: Any) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("records")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    study_logger(uri, STUDY, KNOWN)
    return uri, folder


def test_every_finished_run_becomes_one_sorted_line(store: tuple[str, Path], tmp_path: Path) -> None:
    uri, _ = store
    path = tmp_path / "runs" / "sweep.jsonl"
    added = export_runs(uri, "sweep", path)
    lines = path.read_text().splitlines()
    assert len(added) == len(lines) == 18
    for line in lines:
        record = json.loads(line)
        assert line == json.dumps(record, sort_keys=True, separators=(",", ":"))  # stable: a rerun writes the same
        assert {"params", "evals", "final", "machine", "versions", "mlflow_run_id", "config_hash", "tags"} <= set(
            record
        )
        assert record["machine"] == {"cpu_threads": "2", "device_name": "test cpu", "python": "3.11"}
        assert record["versions"] == {"git_sha": "abc", "versions.torch": "2.x"}
        assert {"train_s", "cpu_s", "flops", "accuracy"} <= set(record["final"])
        assert [e["step"] for e in record["evals"]] == [5, 10] and {"flops", "cpu_s"} <= set(record["evals"][0])
    assert export_runs(uri, "sweep", path) == [] and path.read_text().splitlines() == lines  # nothing twice


def test_a_report_from_the_records_alone_equals_the_report_from_mlflow(
    store: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = store
    export_runs(uri, "sweep", tmp_path / "runs" / "sweep.jsonl")
    from_mlflow = build_report(["sweep"], tracking_uri=uri, out_dir=tmp_path / "a")

    def no_mlflow(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a report from records must not touch MLflow")

    monkeypatch.setattr(store_report, "client", no_mlflow)
    from_records = build_report(records=[tmp_path / "runs"], out_dir=tmp_path / "b")
    assert from_records.markdown == from_mlflow.markdown
    names = sorted(p.name for p in from_records.files)
    assert names == [
        "report.md",
        "summary.csv",
        "sweep-curves.png",
        "sweep-pareto.png",
        "sweep-tradeoff.png",
        "tradeoff.csv",
    ]
    assert "### Accuracy against cost" in from_records.markdown
    assert "| fast | 1ep | 3 |" in from_records.markdown
    assert "better at 1ep, 2ep; within noise at the other 1" in from_records.markdown  # 4ep: beyond its best, >= 1x


def test_a_fresh_store_is_filled_from_the_records_and_a_grid_skips_them(
    store: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = store
    records = tmp_path / "runs"
    export_runs(uri, "sweep", records / "sweep.jsonl")
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    created = import_records(fresh, records / "sweep.jsonl")
    assert len(created) == 18 and import_records(fresh, records / "sweep.jsonl") == []
    assert set(finished_config_hashes(fresh, "sweep")) == {spec.config_hash for spec in expand(STUDY)}
    assert export_runs(fresh, "sweep", records / "sweep.jsonl") == []  # imported runs keep their original ids
    assert (
        build_report(["sweep"], tracking_uri=fresh, out_dir=tmp_path / "c").markdown
        == build_report(records=[records], out_dir=tmp_path / "d").markdown
    )

    def must_not_run(spec: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{spec.run_name} is in the records: it must be skipped")

    monkeypatch.setattr(grid_module, "check_arms", lambda *args, **kwargs: None)
    monkeypatch.setattr(grid_module, "run_one_in_subprocess", must_not_run)
    another = f"sqlite:///{tmp_path / 'another.db'}"  # a new machine: an empty store and the committed records
    result = run_grid(STUDY, tracking_uri=another, records_dir=records, progress=False, log_dir=tmp_path)
    assert len(result.skipped) == 18 and not result.finished and not result.failed
    client = MlflowClient(another)
    (run, *_) = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    assert run.data.tags["cadence.imported_from"] == "sweep.jsonl" and run.info.status == "FINISHED"


def _moved(lines: list[str], arm: str, device_name: str, later_ms: int = 0) -> list[str]:
    """The record lines of `arm` as if they ran on `device_name`, as other runs (new ids), `later_ms` later."""
    moved = []
    for line in lines:
        record = json.loads(line)
        if record["arm"] == arm:
            record["machine"]["device_name"] = device_name
            record["mlflow_run_id"] += "-moved"
            record["end_time"] += later_ms
            moved.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
    return moved


def test_rerun_elsewhere_runs_again_what_last_ran_on_another_machine(
    store: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, _ = store
    records = tmp_path / "runs" / "sweep.jsonl"
    export_runs(uri, "sweep", records)
    lines = records.read_text().splitlines()
    fast = {json.loads(line)["config_hash"] for line in lines if json.loads(line)["arm"] == "fast"}
    records.write_text("\n".join([line for line in lines if json.loads(line)["arm"] != "fast"]
                                 + _moved(lines, "fast", "another cpu")) + "\n")  # fmt: skip
    started: list[str] = []
    monkeypatch.setattr(grid_module, "check_arms", lambda *args, **kwargs: None)
    monkeypatch.setattr(grid_module, "run_one_in_subprocess", lambda spec, **kwargs: started.append(spec.config_hash))
    monkeypatch.setattr(grid_module, "machine_on", lambda device: "test cpu")  # the machine the baseline ran on
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"

    plain = run_grid(STUDY, tracking_uri=fresh, records_dir=records.parent, progress=False, log_dir=tmp_path)
    assert len(plain.skipped) == 18 and started == []  # by default a recorded configuration is done, wherever
    again = run_grid(STUDY, tracking_uri=fresh, records_dir=records.parent, rerun_elsewhere=True, log_dir=tmp_path)
    assert set(started) == fast and len(started) == 9 and len(again.skipped) == 9
    assert (
        "9 of the 18 runs last ran on another machine; they run again on this one: test cpu" in capsys.readouterr().out
    )
    with pytest.raises(ValueError, match="drop rerun_elsewhere or rerun_finished"):
        run_grid(STUDY, tracking_uri=fresh, rerun_finished=True, rerun_elsewhere=True, progress=False)


def test_the_newest_run_of_a_configuration_says_where_it_ran(store: tuple[str, Path], tmp_path: Path) -> None:
    """As the reading keeps only the newest run of a configuration, so does `finished_machines`."""
    uri, _ = store
    records = tmp_path / "sweep.jsonl"
    export_runs(uri, "sweep", records)
    lines = records.read_text().splitlines()
    later = tmp_path / "later.jsonl"
    later.write_text("\n".join(_moved(lines, "fast", "another cpu", later_ms=1000)) + "\n")
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text("\n".join(_moved(lines, "baseline", "another cpu", later_ms=-(10**9))) + "\n")
    both = f"sqlite:///{tmp_path / 'both.db'}"
    for path in (records, later, earlier):
        import_records(both, path)  # each configuration of both arms now has a run on each machine
    by_arm = {json.loads(line)["config_hash"]: json.loads(line)["arm"] for line in lines}
    last_ran_on = finished_machines(both, "sweep")
    here = [key for key, machine in last_ran_on.items() if machine == "test cpu"]
    there = [key for key, machine in last_ran_on.items() if machine == "another cpu"]
    assert {by_arm[key] for key in here} == {"baseline"} and {by_arm[key] for key in there} == {"fast"}
    assert len(here) == len(there) == 9 and len(finished_config_hashes(both, "sweep")) == 18


def test_runs_read_from_two_machines_files_count_once(store: tuple[str, Path], tmp_path: Path) -> None:
    uri, _ = store
    export_runs(uri, "sweep", tmp_path / "a" / "sweep.jsonl")
    export_runs(uri, "sweep", tmp_path / "b" / "sweep.jsonl")
    assert len(read_records([tmp_path / "a", tmp_path / "b"])) == 18
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a run record"):
        read_records([bad])


def test_records_that_cannot_be_read_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": 1}\n')
    assert main(["report", "--records", str(bad), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "bad.jsonl:1: not a run record ('mlflow_run_id')" in error
    assert main(["report", "--records", str(tmp_path / "missing")]) == 2
    assert "no such file or folder of run records (*.jsonl); pass the folder" in capsys.readouterr().err


def test_a_report_or_export_of_an_experiment_that_does_not_exist_is_refused(
    store: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "No finished runs found." (an empty report) or "appended 0 finished runs", with exit code 0."""
    uri, _ = store
    out, runs = tmp_path / "out", tmp_path / "runs"
    for argv, asked in (
        (["report", "--experiment", "swep", "--out", str(out)], "`--experiment` 'swep'"),
        (["export", "swep", "--records", str(runs)], "`export` 'swep'"),
    ):
        assert main([*argv, "--tracking-uri", uri]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"cadence-bench {argv[0]}: {asked}: no experiment of that name in the MLflow store at ")
        assert "(--tracking-uri); did you mean 'sweep'? experiments there: " in line
    assert not out.exists() and not runs.exists()  # nothing was written, nothing replaced
    assert main(["export", "nonexistent_exp", "--tracking-uri", uri, "--records", str(runs)]) == 2
    assert "did you mean" not in capsys.readouterr().err
    export_runs(uri, "sweep", runs / "sweep.jsonl")
    assert main(["report", "--experiment", "swep", "--records", str(runs), "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.endswith(f"in the run records {runs} (--records); did you mean 'sweep'? experiments there: sweep")


def test_git_sha_reads_a_checkout_and_a_worktree_of_it(tmp_path) -> None:
    import subprocess

    from cadence_harness.running.run import git_sha

    def git(*args: str, cwd=tmp_path / "repo") -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    (tmp_path / "repo").mkdir()
    git("init", "-q")
    (tmp_path / "repo" / "a.txt").write_text("a")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    sha = git("rev-parse", "HEAD")
    (tmp_path / "repo" / "sub").mkdir()
    assert git_sha(tmp_path / "repo" / "sub") == sha
    git("worktree", "add", "-q", "--detach", str(tmp_path / "tree"))
    assert git_sha(tmp_path / "tree") == sha  # detached: HEAD holds the commit
    git("checkout", "-q", "-b", "topic", cwd=tmp_path / "tree")
    assert git_sha(tmp_path / "tree") == sha  # on a branch: the ref lives in the main repository
    git("pack-refs", "--all")
    assert git_sha(tmp_path / "tree") == sha  # packed refs too
