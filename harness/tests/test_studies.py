"""A report never mixes or overwrites studies: configurations are never pooled, headers claim only what all
their runs share, one seed gives no speedup, cards come only from a named study's committed records, and
`--methods` keeps the recipe's combinations of other methods out of the grid."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.cli import main
from cadence_harness.reading.cards import MARK_END, MARK_START
from cadence_harness.records import read_records
from cadence_harness.running.bridge import export_runs
from cadence_harness.running.membership import tag_records
from cadence_harness.running.plan import expand
from cadence_harness.running.recipe import Recipe, load_recipe
from cadence_harness.running.runspec import RunSpec
from cadence_harness.store_report import build_report

GRID = Recipe(name="mixed", model="tv/resnet20", data="digits", duration="5ep", subset=5000, seeds=(0, 1, 2))


def test_configurations_are_never_pooled_and_headers_claim_only_what_all_runs_share(
    tracking_uri: str, run_logger: Any, tmp_path: Path
) -> None:
    for seed in GRID.seeds:  # the grid: 3 seeds of the baseline and of `fast`
        run_logger(tracking_uri, RunSpec(GRID, (), seed), 0.80 + seed / 100, 10.0 + seed)
        run_logger(tracking_uri, RunSpec(GRID, ("fast",), seed), 0.82 + seed / 100, 8.0 + seed)
    run_logger(tracking_uri, RunSpec(GRID, ("fast",), 2), 0.90, 10.0, params={"device_name": "other cpu"})  # again
    smoke = dataclasses.replace(GRID, subset=200, duration="1ep")  # a smaller run into the same experiment, later
    for _ in range(2):  # run twice: one configuration, never two seeds
        run_logger(tracking_uri, RunSpec(smoke, (), 0), 0.40, 1.0, command="cadence-bench run --subset 200")
    run_logger(tracking_uri, RunSpec(smoke, ("fast",), 0), 0.41, 0.3, command="cadence-bench run --subset 200")

    report = build_report(["mixed"], tracking_uri=tracking_uri, out_dir=tmp_path / "report")
    small, grid = sorted(report.sections, key=lambda s: s.name)
    assert small.name == "mixed (subset 200)" and grid.name == "mixed (subset 5000)"
    assert [(s.arm, s.n) for s in small.summaries] == [("baseline", 1), ("fast", 1)]
    assert [(s.arm, s.n) for s in grid.summaries] == [("baseline", 3), ("fast", 3)]
    text = report.markdown
    small_text = text[text.index("## mixed (subset 200)") : text.index("## mixed (subset 5000)")]
    grid_text = text[text.index("## mixed (subset 5000)") :]
    assert "first 200 training images); 1ep at batch 32; test cpu (fp32)" in small_text
    assert (
        "first 5000 training images); 5ep at batch 32; 2 machines: test cpu (5 runs); other cpu (1 runs)" in grid_text
    )
    assert "5000" not in small_text and "other cpu" not in small_text
    assert "| fast | 1 |" in small_text and "— (1 seed)" in small_text and "x [" not in small_text  # no speedup
    fast = grid.summaries[1]
    assert fast.accuracy.mean == pytest.approx((0.82 + 0.83 + 0.90) / 3)  # seed 2 counts once: its newer run
    # stable, readable names: the larger family keeps the experiment's name, the other says what sets it apart
    assert sorted(p.name for p in report.files if p.suffix == ".png") == sorted(
        f"{prefix}-{kind}.png" for prefix in ("mixed", "mixed-subset-200") for kind in ("pareto", "curves")
    )


def _study(tmp_path: Path, tiny_recipe_file: Any) -> tuple[str, Recipe]:
    path = tiny_recipe_file(seeds=3, methods={"count": {}}, grid={"arms": ["baseline", "each"]})
    return path, load_recipe(path)


def test_cards_are_written_only_from_a_named_studys_records(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tracking_uri: str,
    run_logger: Any,
    counted: list[int],
    tiny_recipe_file: Any,
) -> None:
    assert main(["report", "--cards", "--tracking-uri", tracking_uri]) == 2
    assert (
        "`--cards` writes the method cards only from a named study's committed run records" in capsys.readouterr().err
    )

    path, recipe = _study(tmp_path, tiny_recipe_file)
    records = tmp_path / "runs"
    assert main(["report", "--study", path, "--records", str(records)]) == 2
    assert f"no run records at {records / 'tiny.jsonl'}" in capsys.readouterr().err
    for spec in expand(recipe):
        run_logger(tracking_uri, spec, 0.5 + 0.1 * len(spec.arm) + spec.seed / 100, 10.0 + spec.seed)
    smoke = dataclasses.replace(recipe, subset=4)  # smoke runs in the same experiment: never in a card
    run_logger(tracking_uri, RunSpec(smoke, ("count",), 0), 0.99, 1.0)
    run_logger(tracking_uri, RunSpec(smoke, (), 0), 0.10, 1.0)
    export_runs(tracking_uri, "tiny", records / "tiny.jsonl")
    tag_records(records / "tiny.jsonl", path)  # as a grid tags its runs (run_logger logs them without one)

    root = tmp_path / "repo" / "packages" / "methods"
    for name in ("count", "other"):
        (root / name).mkdir(parents=True)
        (root / name / "card.md").write_text(
            f"---\nname: {name}\n---\n# {name}\n{MARK_START}\nold results\n{MARK_END}\n"
        )
    index = tmp_path / "repo" / "method_cards" / "INDEX.md"
    argv = ["report", "--study", path, "--records", str(records), "--cards", "--out", str(tmp_path / "out")]
    argv += ["--methods-root", str(root), "--index", str(index)]
    assert main([*argv, "--min-seeds", "4"]) == 2  # a study without enough seeds changes no card
    assert "no arm of its runs has 4 seeds (--min-seeds)" in capsys.readouterr().err
    assert "old results" in (root / "other" / "card.md").read_text() and not index.exists()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "study tiny: 6 of the 8 runs in" in out and "the other 2 (other settings, or an older recipe)" in out
    card = (root / "count" / "card.md").read_text()
    assert "| count | 3 | 61.00" in card and "0.99" not in card and "99.00" not in card and "old results" not in card
    assert "`cadence-bench report --study tiny --cards`" in card
    other = (root / "other" / "card.md").read_text()
    assert "Not measured in the study `tiny`" in other and "old results" not in other
    assert "the study `tiny` (method_cards/runs/tiny.jsonl)" in index.read_text()


def test_methods_on_the_command_line_keep_other_combinations_out(
    capsys: pytest.CaptureFixture[str], image_methods: list[str]
) -> None:
    first = image_methods[0]
    assert main(["grid", "cifar10_resnet20", "--methods", first, "--arms", "baseline,each", "--dry-run"]) == 0
    arms = {line.split()[0].rsplit("-s", 1)[0] for line in capsys.readouterr().out.splitlines()[:-1]}
    assert arms == {"baseline", first}  # the recipe's label_smoothing+cutout uses a method not asked for
    both = "label_smoothing,cutout"
    assert main(["grid", "cifar10_resnet20", "--methods", both, "--arms", "each", "--dry-run"]) == 0
    arms = {line.split()[0].rsplit("-s", 1)[0] for line in capsys.readouterr().out.splitlines()[:-1]}
    assert arms == {"label_smoothing", "cutout", "label_smoothing+cutout"}


def test_a_grid_estimate_counts_flops_per_run(capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any) -> None:
    sweep = tiny_recipe_file(durations=["1ba", "2ba"], duration="2ba", schedule={"name": "cosine"}, seeds=2)
    assert main(["grid", sweep, "--estimate", "--rate", "100"]) == 0
    out = capsys.readouterr().out
    assert "baseline-1ba-s0" in out and "4 runs" in out and "estimate for 4 runs:" in out
    assert "training: 6 batches" in out and "throughput: 100.0 GFLOP/s (given with --rate)" in out
    flops = float(out.split("batches, ")[1].split(" FLOPs")[0])
    assert flops == pytest.approx(6 * 4 * 244e6, rel=0.05)  # ResNet-20: about 244 MFLOPs a 32x32 image, fwd+bwd


def test_cards_from_several_studies_show_each_study_and_name_them_all(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tracking_uri: str,
    run_logger: Any,
    counted: list[int],
    tiny_recipe_file: Any,
) -> None:
    records, root = tmp_path / "runs", tmp_path / "repo" / "packages" / "methods"
    paths = []
    for name, seeds, subset in (("vision", 3, 8), ("text", 3, 7), ("unfinished", 2, 6)):  # each its own settings
        grid = {"arms": ["baseline", "each"]}
        written = tiny_recipe_file(name=name, seeds=seeds, subset=subset, methods={"count": {}}, grid=grid)
        path = Path(written).rename(tmp_path / f"{name}.yaml")
        for spec in expand(load_recipe(str(path))):
            run_logger(tracking_uri, spec, 0.5 + 0.1 * len(spec.arm) + spec.seed / 100, 10.0 + spec.seed)
        export_runs(tracking_uri, name, records / f"{name}.jsonl")
        tag_records(records / f"{name}.jsonl", path)  # as a grid tags its runs
        paths.append(str(path))
    for method in ("count", "other"):
        (root / method).mkdir(parents=True)
        (root / method / "card.md").write_text(f"---\nname: {method}\n---\n{MARK_START}\nold results\n{MARK_END}\n")
    index = tmp_path / "repo" / "method_cards" / "INDEX.md"
    argv = ["report", "--records", str(records), "--cards", "--out", str(tmp_path / "out")]
    argv += ["--methods-root", str(root), "--index", str(index)]

    assert main([*argv, "--study", paths[0], "--study", f"{paths[1]},{paths[2]}"]) == 2  # one study unfinished
    assert "`--study` 'unfinished': no arm of its runs has 3 seeds" in capsys.readouterr().err
    assert "old results" in (root / "count" / "card.md").read_text() and not index.exists()

    assert main([*argv, "--study", paths[0], "--study", paths[1]]) == 0
    card = (root / "count" / "card.md").read_text()
    assert "### vision" in card and "### text" in card and "old results" not in card
    assert "`cadence-bench report --study vision --study text --cards`" in card
    other = (root / "other" / "card.md").read_text()
    assert "Not measured in the studies `vision`, `text`" in other
    assert (
        "the studies `vision`, `text` (method_cards/runs/vision.jsonl, method_cards/runs/text.jsonl)"
        in index.read_text()
    )


def test_a_study_keeps_the_combinations_its_recipe_search_added_with_the_recipes_settings(
    tmp_path: Path, tracking_uri: str, run_logger: Any, counted: list[int], tiny_recipe_file: Any
) -> None:
    """`grid STUDY --combination a+b` (what the recipe search asks for) runs arms outside the recipe's own
    grid; with the recipe's settings they belong to the study, with other settings they do not."""
    from cadence_harness.reading.study import study_runs

    path, recipe = _study(tmp_path, tiny_recipe_file)
    added = load_recipe(path, grid={"arms": ["baseline"], "combinations": [["count", "label_smoothing"]]})
    combination = [s for s in expand(added) if s.arm_name == "count+label_smoothing"]
    assert len(combination) == 3 and not {s.config_hash for s in combination} & {s.config_hash for s in expand(recipe)}
    for spec in [*expand(recipe), *combination[:1]]:  # the combination screened on seed 0
        run_logger(tracking_uri, spec, 0.5, 10.0)
    other = dataclasses.replace(combination[0].recipe, subset=4)  # the same arm with other settings
    run_logger(tracking_uri, RunSpec(other, ("count", "label_smoothing"), 0), 0.9, 1.0)
    export_runs(tracking_uri, "tiny", tmp_path / "runs" / "tiny.jsonl")
    tag_records(tmp_path / "runs" / "tiny.jsonl", path)  # as a grid tags its runs
    name, kept, note = study_runs(path, tmp_path / "runs")
    assert name == "tiny" and "7 of the 8 runs" in note and "the other 1" in note
    assert sorted({r.arm for r in kept}) == ["baseline", "count", "count+label_smoothing"]
    assert [r.config_hash for r in kept if r.arm == "count+label_smoothing"] == [combination[0].config_hash]


def test_a_study_keeps_the_baselines_cyclic_curve_made_with_its_settings(
    tmp_path: Path, tracking_uri: str, run_logger: Any, counted: list[int], tiny_recipe_file: Any
) -> None:
    """`grid STUDY --curve cyclic --arms baseline` runs the baseline's cyclic curve, which the study's report
    checks against the sweep, and the recipe search screens combinations by cyclic runs: both belong to the
    study. A cyclic run of an arm of the recipe's own grid (a sweep) or with other settings stays out."""
    from cadence_harness.reading.study import study_runs
    from cadence_harness.running.budgets import cycles_of

    sweep = {"seeds": 2, "duration": "2ep", "durations": ["1ep", "2ep"], "schedule": {"name": "cosine"}}
    path = tiny_recipe_file(**sweep, methods={"count": {}}, grid={"arms": ["baseline", "each"]})
    recipe = load_recipe(path)
    cyclic = [s for s in expand(load_recipe(path, {"curve": "cyclic"})) if cycles_of(s.recipe)]
    assert sorted(s.arm_name for s in cyclic) == ["baseline", "baseline", "count", "count"]
    combination = {"arms": ["baseline"], "combinations": [["count", "label_smoothing"]]}
    screens = expand(load_recipe(path, {"curve": "cyclic", "seeds": 1}, grid=combination))
    screen = [s for s in screens if s.arm_name == "count+label_smoothing"]
    assert len(screen) == 1 and cycles_of(screen[0].recipe)  # seed 0, one cyclic run
    for spec in [*expand(recipe), *cyclic, *screen]:
        run_logger(tracking_uri, spec, 0.5, 10.0)
    other = dataclasses.replace(cyclic[0].recipe, subset=4)
    run_logger(tracking_uri, RunSpec(other, (), 0), 0.9, 1.0)
    export_runs(tracking_uri, "tiny", tmp_path / "runs" / "tiny.jsonl")
    tag_records(tmp_path / "runs" / "tiny.jsonl", path)  # as a grid tags its runs
    _, kept, note = study_runs(path, tmp_path / "runs")
    assert "11 of the 14 runs" in note  # the sweep's 8, the baseline's 2 cyclic runs and the screen
    baseline_cyclic = {s.config_hash for s in cyclic if s.arm_name == "baseline"}
    own = {s.config_hash for s in expand(recipe)}
    assert {r.config_hash for r in kept} == own | baseline_cyclic | {screen[0].config_hash}


def test_records_are_tagged_with_their_study_once_and_runs_outside_it_stay_untagged(
    tmp_path: Path, tracking_uri: str, run_logger: Any, counted: list[int], tiny_recipe_file: Any
) -> None:
    path, recipe = _study(tmp_path, tiny_recipe_file)
    for spec in expand(recipe):
        run_logger(tracking_uri, spec, 0.5, 10.0)
    run_logger(tracking_uri, RunSpec(dataclasses.replace(recipe, subset=4), (), 0), 0.1, 1.0)  # a smoke run
    records = tmp_path / "runs" / "tiny.jsonl"
    export_runs(tracking_uri, "tiny", records)
    assert tag_records(records, path) == (6, 7)
    tagged = read_records([records])
    assert sorted((r.tag("study"), r.tag("role")) for r in tagged) == [("", "")] + [("tiny", "own")] * 6
    before = records.read_text()
    assert tag_records(records, path) == (0, 7) and records.read_text() == before  # once only


def test_an_arm_run_longer_than_the_recipes_budgets_belongs_to_the_study_and_extends_its_curve(
    tmp_path: Path, tracking_uri: str, run_logger: Any, counted: list[int], tiny_recipe_file: Any
) -> None:
    """The recipe search asks for cost-matched runs (`grid STUDY --arms each --methods count --set
    'durations=[..., "4ep"]'`): they are the arm at a longer budget with the recipe's settings, role `longer`. The
    same budget with other settings stays out."""
    from cadence_harness.reading.study import study_runs
    from cadence_harness.reading.summaries import sections_of

    sweep = {"seeds": 2, "duration": "2ep", "durations": ["1ep", "2ep"], "schedule": {"name": "cosine"}}
    path = tiny_recipe_file(**sweep, methods={"count": {}}, grid={"arms": ["baseline", "each"]})
    longer = load_recipe(path, {"durations": ["1ep", "2ep", "4ep"]}, grid={"arms": ["each"], "methods": ["count"]})
    extra = [s for s in expand(longer) if s.recipe.duration == "4ep"]
    assert [s.arm_name for s in extra] == ["count", "count"]
    for spec in [*expand(load_recipe(path)), *extra]:
        run_logger(tracking_uri, spec, 0.5 + 0.1 * (spec.recipe.duration == "4ep"), 10.0)
    run_logger(tracking_uri, RunSpec(dataclasses.replace(extra[0].recipe, subset=4), ("count",), 0), 0.9, 1.0)
    export_runs(tracking_uri, "tiny", tmp_path / "runs" / "tiny.jsonl")
    tag_records(tmp_path / "runs" / "tiny.jsonl", path)
    _, kept, note = study_runs(path, tmp_path / "runs")
    assert "10 of the 11 runs" in note
    assert sorted(r.seed for r in kept if r.tag("role") == "longer") == [0, 1]
    (section,) = sections_of(kept)
    assert section.sweep_curve("count").budgets == ["1ep", "2ep", "4ep"]  # type: ignore[union-attr]


def test_runs_on_seeds_beyond_the_recipes_belong_to_the_study_in_the_same_role(
    tmp_path: Path, tracking_uri: str, run_logger: Any, counted: list[int], tiny_recipe_file: Any
) -> None:
    """A recipe the search cannot decide on the recipe's seeds asks for more (`grid STUDY --arms baseline
    --seeds 4`, then `--search` confirms each round's leader on them): those runs are the study's own arms and
    added combinations on other seeds, in the same roles; the baseline's curve gains the seeds, the arms that
    did not run them keep theirs. The same seed with other settings stays out."""
    from cadence_harness.reading.study import study_runs
    from cadence_harness.reading.summaries import sections_of

    sweep = {"seeds": 2, "duration": "2ep", "durations": ["1ep", "2ep"], "schedule": {"name": "cosine"}}
    path = tiny_recipe_file(**sweep, methods={"count": {}}, grid={"arms": ["baseline", "each"]})
    more = load_recipe(path, {"seeds": 4}, grid={"arms": ["baseline"], "combinations": [["count", "label_smoothing"]]})
    extra = [s for s in expand(more) if s.seed >= 2]
    assert sorted({s.arm_name for s in extra}) == ["baseline", "count+label_smoothing"] and len(extra) == 8
    for spec in [*expand(load_recipe(path)), *extra]:
        run_logger(tracking_uri, spec, 0.5, 10.0)
    run_logger(tracking_uri, RunSpec(dataclasses.replace(extra[0].recipe, subset=4), (), 2), 0.9, 1.0)
    export_runs(tracking_uri, "tiny", tmp_path / "runs" / "tiny.jsonl")
    tag_records(tmp_path / "runs" / "tiny.jsonl", path)
    _, kept, note = study_runs(path, tmp_path / "runs")
    assert "16 of the 17 runs" in note
    roles = sorted({(r.arm, r.seed, r.tag("role")) for r in kept if r.seed >= 2})
    assert roles == [
        ("baseline", 2, "own"),
        ("baseline", 3, "own"),
        ("count+label_smoothing", 2, "added"),
        ("count+label_smoothing", 3, "added"),
    ]
    (section,) = sections_of(kept)
    assert section.sweep_curve("baseline").seeds == [0, 1, 2, 3]  # type: ignore[union-attr]
    assert section.sweep_curve("count").seeds == [0, 1]  # type: ignore[union-attr]
