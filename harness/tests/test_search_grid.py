"""``grid STUDY --search``: the recipe search runs what it waits for, round after round, until it ends.

The grid here is a stand-in that records known numbers for the runs it is asked for (as `log_run` does
for the report tests), so that the search's path is known; `test_grid.py` tests the real grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.cli import main
from cadence_harness.reading.study import study_runs
from cadence_harness.records import latest_per_config, machine_name, read_records, records_file
from cadence_harness.running.bridge import export_runs
from cadence_harness.running.grid import GridResult
from cadence_harness.running.membership import tag_records
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import Recipe, load_recipe
from cadence_harness.search_grid import elsewhere, pending_reruns, pending_runs, run_search, runs_here, searches

# (accuracy, cost) per budget: `sharp` reaches the baseline's best (0.75) at about 1.6ep; `flat` is the
# baseline again (eligible: worse nowhere); together they are above 0.75 from the shortest budget on.
BASE = {"1ep": (0.60, 10.0), "2ep": (0.70, 20.0), "4ep": (0.75, 40.0)}
KNOWN = {
    "baseline": BASE,
    "label_smoothing": {"1ep": (0.70, 10.0), "2ep": (0.76, 20.0), "4ep": (0.78, 40.0)},
    "channels_last": BASE,
    "label_smoothing+channels_last": {budget: (0.80, cost) for budget, (_, cost) in BASE.items()},
}


PAIR = ["label_smoothing+channels_last"]  # the combination the searches screen and confirm
HERE = "test cpu"  # the machine `log_run` records (conftest.RUN_PARAMS)


class RecordingGrid:
    """`run_grid`'s contract for the search: runs the recipe's grid, minus what the records hold, and appends
    each run to the records, tagged with its study;
    here each run gets its arm's known numbers (seed 1 +0.01, seed 2 -0.01), a
    cyclic run those of each budget at its cycle's end."""

    def __init__(self, uri: str, run_logger: Any, writes: bool = True, machine: str = HERE):
        self.uri, self.run_logger, self.writes, self.machine = uri, run_logger, writes, machine
        self.calls: list[tuple[int, str, list[str]]] = []
        self.reruns: list[bool] = []  # per call: whether it ran again what last ran on another machine
        self.limits: list[float | None] = []  # per call: the seconds it was given to start runs in

    def __call__(self, recipe: Recipe, *, records_dir: Path, **options: Any) -> GridResult:
        arms = sorted({spec.arm_name for spec in expand(recipe)} - {"baseline"})
        self.calls.append((len(recipe.seeds), recipe.curve, arms))
        self.reruns.append(options.get("rerun_elsewhere", False))
        self.limits.append(options.get("time_limit_s"))
        path = records_file(records_dir, recipe.name)
        recorded = latest_per_config(read_records([path])) if path.is_file() else []
        here = [r for r in recorded if not self.reruns[-1] or machine_name(r.params) == self.machine]
        done = {record.config_hash for record in here}
        specs = [spec for spec in expand(recipe) if spec.config_hash not in done]
        for spec in specs if self.writes else []:
            points = [KNOWN[spec.arm_name][budget] for budget in spec.cycles or (spec.recipe.duration,)]
            points = [(acc + (0, 0.01, -0.01)[spec.seed], cost * (1 + 0.05 * spec.seed)) for acc, cost in points]
            params = {"device_name": self.machine}
            self.run_logger(self.uri, spec, *points[-1], cycles=points if spec.cycles else (), params=params)
        export_runs(self.uri, recipe.name, path)
        if path.is_file():
            tag_records(path, recipe.source)  # a grid's records say their study and role
        return GridResult(planned=len(specs), finished=specs if self.writes else [])


@pytest.fixture(scope="module")
def recorded_study(tmp_path_factory: pytest.TempPathFactory, run_logger: Any) -> tuple[str, Path]:
    """A study of two methods over three budgets, 3 seeds, its grid recorded (once for the module): its
    recipe file and its records file."""
    folder = tmp_path_factory.mktemp("study")
    path = folder / "searched.yaml"
    recipe = {"name": "searched", "model": "tv/resnet20", "data": "synthetic", "subset": 8, "batch_size": 4}
    recipe |= {"duration": "4ep", "durations": list(BASE), "schedule": {"name": "cosine"}, "seeds": 3}
    recipe |= {"methods": {"label_smoothing": {}, "channels_last": {}}, "grid": {"arms": ["baseline", "each"]}}
    path.write_text(json.dumps(recipe))
    RecordingGrid(f"sqlite:///{folder / 'mlflow.db'}", run_logger)(load_recipe(path), records_dir=folder / "runs")
    return str(path), records_file(folder / "runs", "searched")


@pytest.fixture
def study(recorded_study: tuple[str, Path], tmp_path: Path) -> tuple[str, Path]:
    """The recorded study, its records copied for this test to add to: (its recipe file, the records folder)."""
    path, records = recorded_study
    (tmp_path / "runs").mkdir()
    shutil.copy(records, tmp_path / "runs" / records.name)
    return path, tmp_path / "runs"


def test_the_search_screens_confirms_and_ends_with_its_recipe(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid) == 0
    # screened on seed 0, then confirmed on all 3; the FLOPs and the time searches ask for the same arm once
    assert grid.calls == [(1, "sweep", PAIR), (3, "sweep", PAIR)]
    out = capsys.readouterr().out
    assert "the search waits for: cadence-bench grid" in out and "--combination label_smoothing+channels_last" in out
    assert "Best recipe so far: **label_smoothing+channels_last**" in out and "it qualifies" in out
    again = RecordingGrid(tracking_uri, run_logger)
    assert (
        run_search(path, records_dir=records, machine=HERE, run_grid=again) == 0 and again.calls == []
    )  # nothing left to run


def test_the_studys_own_grid_is_completed_before_the_search_reads_its_curves(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A search on a partial study would screen against a provisional target: its missing runs come first."""
    path, records = study
    file = records_file(records, "searched")
    lines = file.read_text().splitlines()
    kept = [line for line in lines if '"run_name":"baseline-4ep-s2"' not in line]
    assert len(kept) == len(lines) - 1
    file.write_text("\n".join(kept) + "\n")
    assert (
        run_search(
            path, records_dir=records, machine=HERE, run_grid=RecordingGrid(tracking_uri, run_logger), dry_run=True
        )
        == 0
    )
    assert f"the study's own grid lacks 1 runs, which come first: cadence-bench grid {path}" in capsys.readouterr().out
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid) == 0
    assert grid.calls[0] == (3, "sweep", ["channels_last", "label_smoothing"])  # the study's grid: every arm and seed
    assert grid.calls[1:] == [(1, "sweep", PAIR), (3, "sweep", PAIR)]


def test_with_the_baselines_cyclic_curve_a_round_is_screened_by_cyclic_runs_and_its_leader_confirmed_by_the_sweep(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    cyclic_baseline = load_recipe(path, {"curve": "cyclic"}, grid={"arms": ["baseline"], "combinations": []})
    RecordingGrid(tracking_uri, run_logger)(cyclic_baseline, records_dir=records)  # the study's cyclic check
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid) == 0
    assert grid.calls == [(1, "cyclic", PAIR), (3, "sweep", PAIR)]
    out = capsys.readouterr().out
    assert "--combination label_smoothing+channels_last --seeds 1 --curve cyclic" in out
    # the recipe is read off the sweep on every seed, not the screen
    assert "Round 1, from label_smoothing: label_smoothing+channels_last: >= 4.00x" in out
    assert "cyclic screen" not in out
    assert "Best recipe so far: **label_smoothing+channels_last**" in out and "it qualifies" in out
    kept = [r for r in read_records([records_file(records, "searched")]) if r.arm == "label_smoothing+channels_last"]
    assert (
        sorted((r.seed, bool(r.cycles)) for r in kept)
        == [(0, False)] * 3 + [(0, True)] + [(1, False)] * 3 + [(2, False)] * 3
    )


def test_a_dry_run_names_the_next_runs_and_runs_nothing(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid, dry_run=True) == 0 and grid.calls == []
    waits = f"cadence-bench grid {path} --arms baseline --combination label_smoothing+channels_last --seeds 1"
    assert waits in capsys.readouterr().out


def test_runs_that_never_reach_the_records_stop_the_search_instead_of_looping(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    grid = RecordingGrid(tracking_uri, run_logger, writes=False)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid) == 1 and len(grid.calls) == 1
    assert "these runs were made, yet the search asks for them again" in capsys.readouterr().out


def test_the_command_line_search_keeps_the_studys_own_settings(
    study: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    assert main(["grid", path, "--search", "--seeds", "2", "--combination", "a+b", "--records", str(records)]) == 2
    assert "drop --combination, --seeds" in capsys.readouterr().err
    assert main(["grid", path, "--search", "--rerun-elsewhere", "--records", str(records)]) == 2
    assert "drop --rerun-elsewhere" in capsys.readouterr().err
    assert main(["grid", path, "--rerun-finished", "--rerun-elsewhere"]) == 2  # argparse refuses both at once
    (line,) = capsys.readouterr().err.splitlines()  # in one line, as every refusal
    assert "argument --rerun-elsewhere: not allowed with argument --rerun-finished" in line
    assert main(["grid", path, "--search", "--dry-run", "--records", str(records)]) == 0
    assert "--combination label_smoothing+channels_last --seeds 1" in capsys.readouterr().out


def test_on_another_machine_the_time_search_is_read_but_only_the_flops_search_runs(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A time measured on another machine is never compared with the baseline's: running the time search's
    candidates there would spend the runs for nothing, and a screen it cannot compare decides no round."""
    path, records = study
    grid = RecordingGrid(tracking_uri, run_logger, machine="other cpu")
    assert run_search(path, records_dir=records, machine="other cpu", run_grid=grid) == 0
    assert grid.calls == [(1, "sweep", PAIR), (3, "sweep", PAIR)]  # the FLOPs search screens and confirms
    out = capsys.readouterr().out
    flops, timed = out.split("The recipe (training time)")
    assert "Best recipe so far: **label_smoothing+channels_last**" in flops
    assert "Round 1, from label_smoothing: label_smoothing+channels_last: not compared" in timed
    assert "waiting for label_smoothing+channels_last to run again on the baseline's machine" in timed
    rerun = "--combination label_smoothing+channels_last --seeds 3 --rerun-elsewhere --data-dir ../shared/data"
    assert (
        f"The search continues once these run again on test cpu: `cadence-bench grid searched --arms baseline {rerun}`"
        in timed
    )
    assert "no candidate improves on it" not in timed  # a candidate not compared is not a candidate that lost
    assert "the training time search waits for label_smoothing+channels_last on test cpu" in out

    # on the baseline's machine the time search runs the pair again, on the seeds it has, and then decides
    here = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=here) == 0
    assert here.calls == [(3, "sweep", PAIR)] and here.reruns == [True]
    timed = capsys.readouterr().out.split("The recipe (training time)")[1]
    assert "Best recipe so far: **label_smoothing+channels_last**" in timed and "not compared" not in timed


def test_a_time_search_whose_baseline_ran_on_several_machines_compares_nothing_and_runs_nothing_again(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    file = records_file(records, "searched")
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    for line in lines:  # one baseline run on another machine: the baseline has no one machine
        if line["run_name"] == "baseline-4ep-s2":
            line["machine"]["device_name"] = "other cpu"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grid = RecordingGrid(tracking_uri, run_logger, machine="other cpu")
    assert run_search(path, records_dir=records, machine="other cpu", run_grid=grid) == 0
    assert grid.calls == [(1, "sweep", PAIR), (3, "sweep", PAIR)] and not any(grid.reruns)  # the FLOPs search only
    timed = capsys.readouterr().out.split("The recipe (training time)")[1]
    assert timed.count("| not compared: its times and the baseline's come from different machines |") == 2
    assert "No method is eligible alone, so there is no recipe to grow." in timed and "--rerun-elsewhere" not in timed


def test_a_time_search_waits_for_its_runs_on_its_baselines_machine_only(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    _, runs, _ = study_runs(path, records)
    found = searches(runs)
    timed = next(search for search in found if search.unit == "train_s")
    assert timed.to_run == PAIR and timed.machine == HERE
    assert runs_here(timed, HERE) and not runs_here(timed, "other cpu")
    flops_only = pending_runs(found, "other cpu")
    assert flops_only == pending_runs(found, HERE) == [(1, "sweep", tuple(PAIR))]  # FLOPs asks for it anywhere
    assert pending_runs([timed], "other cpu") == [] and pending_runs([timed], HERE) == [(1, "sweep", tuple(PAIR))]
    assert elsewhere(found, HERE) == []
    (said,) = elsewhere(found, "other cpu")
    assert said.startswith("the training time search waits for label_smoothing+channels_last on test cpu;")
    assert "this machine is other cpu" in said
    assert "on test cpu (the baseline's machine: times compare only within one)" in timed.markdown()
    grid = RecordingGrid(tracking_uri, run_logger, machine="other cpu")
    assert run_search(path, records_dir=records, machine="other cpu", run_grid=grid, dry_run=True) == 0
    assert said in capsys.readouterr().out


def test_on_its_baselines_machine_the_time_search_first_runs_again_the_methods_alone_that_ran_elsewhere(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rounds start from the methods alone: one whose times cannot be compared would be left out of the
    recipe by the machine it ran on, not by its speed."""
    path, records = study
    file = records_file(records, "searched")
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    for line in lines:
        if line["arm"] == "channels_last":
            line["machine"]["device_name"] = "other cpu"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, runs, _ = study_runs(path, records)
    timed = next(search for search in searches(runs) if search.unit == "train_s")
    assert timed.own_elsewhere == ["channels_last"]
    assert "1 method alone ran on another machine than the baseline, so this search cannot rank it" in timed.markdown()
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid, dry_run=True) == 0 and not grid.calls
    said = "the training time search cannot rank channels_last, which ran alone on another machine than its baseline"
    assert said in capsys.readouterr().out
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid) == 0
    assert grid.calls[0] == (3, "sweep", ["channels_last", "label_smoothing"]) and grid.reruns[0]  # the own grid
    assert grid.calls[1:] == [(1, "sweep", PAIR), (3, "sweep", PAIR)] and not any(grid.reruns[1:])
    again = [r for r in read_records([file]) if r.arm == "channels_last"]
    assert sorted(machine_name(r.params) for r in again) == ["other cpu"] * 9 + [HERE] * 9  # the old runs stay
    assert "cannot rank" not in capsys.readouterr().out.split("The recipe (training time)")[1]


def test_a_search_stops_starting_runs_at_its_time_limit(
    study: tuple[str, Path], tracking_uri: str, run_logger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, records = study
    grid = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=grid, time_limit_s=1e-9) == 0
    assert grid.calls == [] and "the time limit has passed: `cadence-bench grid" in capsys.readouterr().out
    timed = RecordingGrid(tracking_uri, run_logger)
    assert run_search(path, records_dir=records, machine=HERE, run_grid=timed, time_limit_s=3600) == 0
    assert timed.calls == [(1, "sweep", PAIR), (3, "sweep", PAIR)]  # each grid is given what is left of the hour
    assert 3600 >= timed.limits[0] > timed.limits[1] > 3000


def test_the_resnet20_time_search_reruns_the_methods_alone_that_ran_on_the_older_machine() -> None:
    """On the committed records: 18 methods alone ran on an older "AMD EPYC" than the baseline, and they are what
    the time search asks to run again; a candidate whose sweep ran beside the baseline is compared, even where a
    cyclic screen of it ran elsewhere (an arm's curves are judged one by one, not by the arm's name)."""
    root = Path(__file__).resolve().parents[2]
    _, runs, _ = study_runs("cifar10_resnet20_study", root / "method_cards" / "runs")
    timed = next(search for search in searches(runs) if search.unit == "train_s")
    assert timed.machine == "AMD EPYC (family 26, model 2)" and len(timed.own_elsewhere) == 18
    assert {"blurpool", "progressive_resizing", "sam"} <= set(timed.own_elsewhere)
    assert not {"layer_freezing", "colout", "scale_schedule"} & set(timed.own_elsewhere)  # ran beside the baseline
    assert timed.rerun == {}  # blurpool+layer_freezing: its sweep ran on the baseline's machine
    assert pending_reruns(searches(runs), timed.machine) == []
