"""Results that read in one line (issue 31, item 4): the plain-words first line of a card and of a study, the
hyperparameters each arm ran with, paste-able commands, and plots a report names, with stable names and
one colour per arm."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from cadence_harness.reading.cards import MARK_END, MARK_START, write_cards, write_index
from cadence_harness.reading.commands import portable, recipe_argument
from cadence_harness.reading.plain import hyperparameters, in_short, study_in_short
from cadence_harness.reading.plots import _palette, colours, plot_prefix, report_palette
from cadence_harness.reading.report import report_from_runs
from cadence_harness.reading.summaries import sections_of, summarize
from cadence_harness.records import RunRecord
from cadence_harness.running.recipe import Recipe
from cadence_harness.running.runspec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
COMMAND = (
    "cadence-bench grid /home/ann/cadence/harness/recipes/known.toml --data-dir /home/ann/shared/data "
    "--records /home/ann/cadence/method_cards/runs --tracking-uri sqlite:////tmp/ann/s.db --log-dir /tmp/ann/logs"
)
RECIPE = Recipe(
    name="known", model="tv/resnet20", data="digits", duration="2ep", methods={"fast": {}, "flat": {}, "slow": {}}
)
ACCURACY = {  # arm: per seed; `fast` is more accurate on every seed, `slow` less, `flat` the same within noise
    (): [0.80, 0.82, 0.81],
    ("fast",): [0.86, 0.87, 0.87],
    ("flat",): [0.81, 0.80, 0.82],
    ("slow",): [0.70, 0.71, 0.71],
}


def record(arm: tuple[str, ...], seed: int, accuracy: float, recipe: Recipe = RECIPE, **params: str) -> RunRecord:
    """A finished run as its record line holds it: no MLflow, no training."""
    spec = RunSpec(recipe, arm, seed)
    return RunRecord(
        run_id=f"{spec.run_name}",
        experiment="known",
        tags={**spec.tags(), "cadence.command": COMMAND},
        params={"model": recipe.model, "data": "digits", "duration": "2ep", "batch_size": "32", **params},
        metrics={"final/accuracy": accuracy, "final/train_s": 10.0 + seed, "final/flops": 1e12},
    )


@pytest.fixture(scope="module")
def runs() -> list[RunRecord]:
    params = {
        ("fast",): {"method.fast": "Fast(alpha=0.2, input_key=0, seed=None)", "method.fast.alpha": "0.2"},
        ("flat",): {"method.flat": "Flat(mode='x')"},
        ("slow",): {"method.slow": "Slow()"},
    }
    return [
        record(arm, seed, accuracy, **params.get(arm, {}))
        for arm, accuracies in ACCURACY.items()
        for seed, accuracy in enumerate(accuracies)
    ]


def test_commands_are_shown_relative_to_the_repository_and_the_records_are_unchanged() -> None:
    assert portable(COMMAND) == "cadence-bench grid known --data-dir ../shared/data --records method_cards/runs"
    kept = "cadence-bench grid x --tracking-uri http://server:5000 --records=/r/cadence/method_cards/runs"
    assert portable(kept) == "cadence-bench grid x --tracking-uri http://server:5000 --records=method_cards/runs"
    scratch = "cadence-bench grid cifar10_fast_study --time-limit 470 --records /tmp/rec"  # a GPU machine's folder
    assert portable(scratch) == "cadence-bench grid cifar10_fast_study --time-limit 470 --records method_cards/runs"
    assert portable("cadence-bench grid s --records=/root/out/records").endswith("--records=method_cards/runs")
    quoted = "cadence-bench grid s --set 'grid.combinations=[]' --log-dir=/tmp/x"
    assert portable(quoted) == "cadence-bench grid s --set 'grid.combinations=[]'"
    for study in ("cifar10_resnet20_study", "cifar10_fast_study"):  # a CPU study, and a GPU study's scratch records
        for line in (ROOT / "method_cards" / "runs" / f"{study}.jsonl").read_text().splitlines():
            shown = portable(json.loads(line)["tags"]["cadence.command"])
            assert not re.search(r"(^|\s|=)/", shown), shown  # no absolute path left


def test_a_report_names_a_study_as_its_grids_named_their_recipe() -> None:
    """A study's name is its recipe file's stem, which ``cadence-bench grid`` cannot find: the commands a report
    prints to add runs name the file, as the study's own grids did."""
    records = "--records /home/x/cadence/method_cards/runs"
    own = [f"cadence-bench grid /home/x/studies/my_study.toml {records}", "cadence-bench grid ../studies/my_study.toml"]
    assert recipe_argument(own, "my_study") == "../studies/my_study.toml"  # relative to the repository
    shipped = [f"cadence-bench grid /home/x/cadence/harness/recipes/cifar10_fast_study.toml {records}"]
    assert recipe_argument([*shipped, "cadence-bench grid cifar10_fast_study"], "cifar10_fast_study") == (
        "cifar10_fast_study"
    )
    assert recipe_argument(["cadence-bench grid other.toml", "python -m x 'unbalanced"], "my_study") == "my_study"


def test_each_arm_shows_the_hyperparameters_it_ran_with(runs: list[RunRecord]) -> None:
    text = hyperparameters(summarize(runs), names={"fast": "Fast"})
    assert "Fast ran with alpha 0.2." in text  # repr and explicit key agree; input_key and seed are plumbing
    assert "flat ran with mode x." in text and "slow ran with its defaults." in text


def test_the_first_line_says_what_the_method_gains_here(runs: list[RunRecord]) -> None:
    (section,) = sections_of(runs)
    line = in_short("fast", "Fast", [section])
    assert line.startswith("**In short.** On tv/resnet20 on digits at budget 2ep, Fast alone (3 seeds per budget)")
    assert "worth trying: more accurate at 2ep" in line and "\n" not in line
    assert "not worth it: less accurate at 2ep" in in_short("slow", "Slow", [section])
    assert "no measurable gain (or loss)" in in_short("flat", "Flat", [section])
    study = study_in_short(section)
    assert "measurably better: fast;" in study and "measurably worse: slow;" in study
    assert "no measurable gain or loss: 1 of the 3 methods measured alone" in study


def test_an_accuracy_gain_counts_only_if_it_survives_the_studys_correction() -> None:
    """One arm's interval excludes 0 (p = 0.028) among 20 arms that change nothing: by chance, one 95% interval
    in twenty does that. Benjamini-Hochberg over the 21 accuracy cells leaves it unclaimed; alone it would stand."""
    base = [0.800, 0.810, 0.820, 0.805]
    lucky = [0.806, 0.812, 0.829, 0.811]  # differences 0.006, 0.002, 0.009, 0.006: p = 0.028
    nulls = {f"null{i:02d}": [b + d for b, d in zip(base, ((-1) ** i * 0.004, 0.003, -0.003, -(-1) ** i * 0.004))]
             for i in range(20)}  # fmt: skip
    arms = {(): base, ("lucky",): lucky, **{(name,): values for name, values in nulls.items()}}
    recipe = Recipe(name="known", model="tv/resnet20", data="digits", duration="2ep",
                    methods={name[0]: {} for name in arms if name})  # fmt: skip
    runs = [record(arm, seed, a, recipe) for arm, values in arms.items() for seed, a in enumerate(values)]
    (section,) = sections_of(runs)
    (row,) = [s for s in section.summaries if s.arm == "lucky"]
    assert row.accuracy_delta.low > 0 and 0.02 < row.accuracy_p < 0.05  # its own interval excludes 0
    assert row.accuracy_q > 0.05 and "no measurable gain (or loss)" in in_short("lucky", "Lucky", [section])
    alone = [r for r in runs if r.arm in ("baseline", "lucky")]
    (alone_section,) = sections_of(alone)
    assert "more accurate at 2ep" in in_short("lucky", "Lucky", [alone_section])


def test_a_time_ratio_without_a_curve_counts_only_if_it_survives_the_studys_correction() -> None:
    """One budget, no curve: an arm reads "less training time" from its same-budget time ratio only where the
    ratio's q-value over the section's ratio cells is below 0.05. The lucky arm's paired t-test gives p = 0.028
    (its interval excludes 1, which alone read as a gain before) among 20 arms that change nothing; the fast arm
    trains in 0.8 of the time."""
    base = [10.0, 11.0, 12.0, 10.5]
    shifts = {
        ("lucky",): [0.006, 0.002, 0.009, 0.006],
        ("fast",): [0.22, 0.23, 0.21, 0.22],
        **{(f"null{i:02d}",): [(-1) ** i * 0.004, 0.003, -0.003, -((-1) ** i) * 0.004] for i in range(20)},
    }
    recipe = Recipe(name="known", model="tv/resnet20", data="digits", duration="2ep",
                    methods={name[0]: {} for name in shifts})  # fmt: skip
    times = {(): base, **{arm: [b * math.exp(-d) for b, d in zip(base, ds)] for arm, ds in shifts.items()}}
    runs = [
        dataclasses.replace(r, metrics={**r.metrics, "final/train_s": t})
        for arm, values in times.items()
        for seed, t in enumerate(values)
        for r in [record(arm, seed, 0.8, recipe)]
    ]
    (section,) = sections_of(runs)
    rows = {s.arm: s for s in section.summaries}
    assert rows["lucky"].speedup.low > 1 and 0.02 < rows["lucky"].ratio_p["train_s"] < 0.05
    assert rows["lucky"].ratio_q["train_s"] > 0.05 and rows["fast"].ratio_q["train_s"] < 0.05
    assert "less training time" not in in_short("lucky", "Lucky", [section])
    assert "less training time at 2ep" in in_short("fast", "Fast", [section])


def test_cards_and_index_open_with_the_line_then_settings_and_paste_able_commands(
    runs: list[RunRecord], tmp_path: Path
) -> None:
    report = report_from_runs(runs, out_dir=tmp_path / "report", plots=False)
    root = tmp_path / "repo" / "packages" / "methods"
    (root / "fast").mkdir(parents=True)
    (root / "fast" / "card.md").write_text(f"---\nname: Fast\n---\n# Fast\n{MARK_START}\n{MARK_END}\n")
    (card,) = write_cards(report.summaries, methods_root=root, sections=report.sections, plots_link_prefix=None)
    block = card.read_text().split(MARK_START)[1]
    assert block.lstrip().startswith("**In short.** On tv/resnet20 on digits at budget 2ep, Fast alone")
    assert "Fast ran with alpha 0.2." not in block and "fast ran with alpha 0.2." in block
    assert "`cadence-bench grid known --data-dir ../shared/data --records method_cards/runs`" in block
    assert "/home/ann" not in block and "`(3/3)`" in block and "q-value (`q=`" in block
    index = write_index(
        report.summaries, methods_root=root, index_path=tmp_path / "repo" / "INDEX.md", sections=report.sections
    ).read_text()
    study = index.split("\n## known\n", 1)[1].lstrip()
    assert study.startswith("**In short.** On tv/resnet20 on digits at budget 2ep, each method alone")
    assert "/home/ann" not in index


def test_a_report_names_its_plots_with_stable_names_and_fixed_colours(runs: list[RunRecord], tmp_path: Path) -> None:
    report = report_from_runs(runs, out_dir=tmp_path / "report")
    plots = sorted(p.name for p in report.files if p.suffix == ".png")
    assert plots == ["known-curves.png", "known-pareto.png"]
    assert "Plots: [accuracy against training time](known-pareto.png), [accuracy over training time]" in (
        report.markdown
    )
    assert "Reproduce: `cadence-bench grid known --data-dir ../shared/data --records method_cards/runs`" in (
        report.markdown
    )
    palette = report_palette(report.sections)
    assert palette["baseline"] == "black" and len(set(palette.values())) == len(palette)
    # a card's plot shows the baseline and one arm: it keeps the report's colour, not the first of the cycle
    assert colours(["baseline", "slow"])["slow"] != palette["slow"]
    assert _palette(["baseline", "slow"], palette)["slow"] == palette["slow"]


def test_a_second_family_gets_a_readable_prefix_not_a_hash(runs: list[RunRecord]) -> None:
    deeper = Recipe(name="known", model="tv/resnet56", data="digits", duration="2ep", methods={})
    other = [record((), seed, 0.5, deeper) for seed in range(2)]
    sections = sections_of([*runs, *other])
    prefixes = sorted(plot_prefix(s, sections) for s in sections)
    assert prefixes == ["known", "known-model-tv-resnet56"]
