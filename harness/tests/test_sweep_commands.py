"""The commands of a tradeoff study, end to end on a tiny recipe through `cadence-bench` itself: a grid over budgets
writes run records as its runs finish, `report` builds the curves and speedups from the records alone, a second
machine with an empty store imports them and runs nothing again, and a cyclic grid adds one run per arm and seed
while reusing the baseline's sweep. Runs train in this process (the worker's `execute`) to stay fast; the
subprocess path is tested in test_grid.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadence_harness.cli import main
from cadence_harness.reading.cards import MARK_END, MARK_START
from cadence_harness.running import grid as grid_module
from cadence_harness.running.run import execute

SWEEP = {
    "durations": ["1ba", "2ba"],
    "schedule": {"name": "cosine_warmup", "t_warmup": "0.5dur"},
    "seeds": 2,
    "grid": {"arms": ["baseline", "each"]},
}


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Grid runs train in this process, as a worker would; the list records their names in order."""
    started: list[str] = []

    def run_here(spec: Any, *, uri: str, tags: dict[str, str], **kwargs: Any) -> None:
        started.append(spec.run_name)
        execute(spec, tracking_uri=uri, tags=tags, progress_bar=False)

    monkeypatch.setattr(grid_module, "run_one_in_subprocess", run_here)
    return started


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_study_from_grid_to_report_to_a_cyclic_curve_and_to_a_second_machine(
    tmp_path: Path, tiny_recipe_file: Any, image_methods: list[str], in_process: list[str], capsys: Any
) -> None:
    method = image_methods[0]
    recipe = tiny_recipe_file(**SWEEP, methods={method: {}})
    records, out = tmp_path / "runs", tmp_path / "report"
    common = ["--tracking-uri", f"sqlite:///{tmp_path / 'a.db'}", "--records", str(records)]
    assert main(["grid", recipe, *common, "--log-dir", str(tmp_path / "logs")]) == 0
    blocks = [(seed, b) for seed in (0, 1) for b in ("1ba", "2ba")]  # each arm in turn, reversed every other block
    arms = ("baseline", method)
    assert in_process == [
        f"{arm}-{b}-s{seed}" for i, (seed, b) in enumerate(blocks) for arm in (arms if i % 2 == 0 else arms[::-1])
    ]
    written = lines(records / "tiny.jsonl")
    assert [r["run_name"] for r in written] == in_process  # one line per run, appended as each finished
    assert all(r["final"]["flops"] > 0 and r["final"]["cpu_s"] > 0 for r in written)
    one, two = (next(r for r in written if r["run_name"] == f"baseline-{b}-s0") for b in ("1ba", "2ba"))
    assert two["final"]["flops"] == 2 * one["final"]["flops"]  # same shapes: twice the batches, twice the FLOPs
    capsys.readouterr()

    assert main(["report", "--records", str(records), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "### Accuracy against cost" in text and "### Against the baseline's curve" in text
    assert f"| {method} | 1ba | 2 |" in text and "### Pareto front over all arms" in text
    assert {"tiny-tradeoff.png", "tradeoff.csv"} <= {p.name for p in out.iterdir()}

    in_process.clear()  # the cyclic curve: one run per arm and seed; the baseline's sweep is there already
    assert main(["grid", recipe, *common, "--curve", "cyclic"]) == 0
    assert in_process[:2] == ["baseline-cyclic-s0", f"{method}-cyclic-s0"]  # seed by seed (the order alternates)
    assert sorted(in_process[2:]) == sorted(["baseline-cyclic-s1", f"{method}-cyclic-s1"])
    capsys.readouterr()
    assert main(["report", "--records", str(records), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "### The cyclic curve against the sweep" in text
    assert "cyclic - sweep accuracy on the baseline (n=2): 1ba: " in text
    assert f"| {method} (cyclic) | 1ba | 2 |" in text

    in_process.clear()  # another machine: an empty store, the committed records
    second = ["grid", recipe, "--tracking-uri", f"sqlite:///{tmp_path / 'b.db'}", "--records", str(records)]
    assert main(second) == 0
    assert in_process == [] and "imported 12 finished runs" in capsys.readouterr().out
    assert len(lines(records / "tiny.jsonl")) == 12  # nothing written twice

    root, index = tmp_path / "repo" / "packages" / "methods", tmp_path / "repo" / "method_cards" / "INDEX.md"
    for name in (method, "other"):
        (root / name).mkdir(parents=True)
        (root / name / "card.md").write_text(f"---\nname: {name}\n---\n{MARK_START}\nold\n{MARK_END}\n")
    study = ["report", "--study", recipe, "--records", str(records), "--out", str(out), "--cards", "--min-seeds", "2"]
    assert main([*study, "--methods-root", str(root), "--index", str(index)]) == 0
    text = capsys.readouterr().out  # the study: the recipe's own grid, and the baseline's cyclic check of it
    assert "study tiny: 10 of the 12 runs" in text and f"{method} (cyclic)" not in text
    assert "### The cyclic curve against the sweep" in text
    card = (root / method / "card.md").read_text()  # a method's card: its arms and the baseline's sweep
    assert "#### Accuracy against cost" in card and f"tiny-tradeoff-{method}.png" in card and "(cyclic)" not in card
    assert "Not measured in the study `tiny`" in (root / "other" / "card.md").read_text()  # nor a baseline-only plot
    assert sorted(p.name for p in index.parent.glob("tiny-tradeoff-*.png")) == [f"tiny-tradeoff-{method}.png"]
    assert "tiny: verdict" in index.read_text() and "Pareto front (FLOPs)" in index.read_text()
