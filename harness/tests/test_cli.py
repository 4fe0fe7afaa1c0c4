"""The command line: errors name the bad key and exit 2; dry runs list a grid; methods are listed."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from cadence.registry import registry
from cadence_harness.cli import main
from cadence_harness.demo import demo_recipe


def test_grid_dry_run_lists_runs_with_their_hashes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "cifar10_resnet20", "--dry-run", "--seeds", "2", "--arms", "baseline"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines[:-1]]
    assert lines[-1] == "4 runs" and names == [  # the second seed's block in reverse order
        "baseline-s0", "label_smoothing+cutout-s0", "label_smoothing+cutout-s1", "baseline-s1"
    ]  # fmt: skip


def test_shards_of_a_dry_run_split_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    counts = []
    for shard in ("1/2", "2/2"):
        main(["grid", "cifar10_resnet20", "--dry-run", "--shard", shard])
        counts.append(int(capsys.readouterr().out.splitlines()[-1].split()[0]))
    main(["grid", "cifar10_resnet20", "--dry-run"])
    assert sum(counts) == int(capsys.readouterr().out.splitlines()[-1].split()[0])


def test_a_bad_recipe_exits_2_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--model", "tv/resnet20", "--data", "synthetic", "--duration", "2 epochs"])
    assert code == 2 and "`duration` = '2 epochs'" in capsys.readouterr().err
    assert main(["run", "--model", "tv/resnet20", "--data", "synthetic", "--duration", "1ba", "--methods", "nope"]) == 2
    assert "`methods.nope`: no installed method named 'nope'" in capsys.readouterr().err
    assert main(["grid", "cifar10_resnet20", "--set", "batchsize=3", "--dry-run"]) == 2
    assert "did you mean 'batch_size'" in capsys.readouterr().err


def test_methods_lists_every_installed_method_with_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{name}: " in f"\n{out}" for name in registry().methods)
    if "blurpool" in registry().methods:  # its card's tldr, then its hyperparameters
        assert "blurpool: Low-pass filters (blurs) before every strided convolution" in out
        assert "    BlurPool(replace_convs: 'bool' = True" in out


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "run: one configuration; grid:" in text


def test_a_run_ends_with_a_line_in_words_and_where_to_browse_it(
    capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any, tracking_uri: str
) -> None:
    assert main(["run", tiny_recipe_file(), "--tracking-uri", tracking_uri, "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("baseline-s0: accuracy ") and " s of training, " in lines[-2]
    assert "in experiment 'tiny'; data: " in lines[-2] and "{" not in lines[-2]  # no raw dict
    assert lines[-1] == f"Browse: mlflow ui --backend-store-uri {tracking_uri}"


def test_demo_uses_cifar10_when_present_else_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    from cadence_harness import demo

    def missing(*args: Any) -> Any:
        raise demo.DataNotFoundError("no")

    monkeypatch.setattr(demo, "find_dataset_files", missing)
    recipe, note = demo_recipe()
    assert recipe.data == "digits" and "digits" in note and "CIFAR-10 was not found" in note
    assert recipe.seeds == (0,) and recipe.device == "cpu" and recipe.grid["arms"] == ["baseline", "each"]


def test_the_recorded_command_is_paste_able_in_any_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    from cadence_harness import cli
    from cadence_harness.running.data import REPO_ROOT

    recipe, records = REPO_ROOT / "harness" / "recipes" / "cifar10_fast.toml", REPO_ROOT / "method_cards" / "runs"
    argv = ["cadence-bench", "grid", str(recipe), "--records", str(records), "--data-dir", "/elsewhere/data"]
    monkeypatch.setattr(sys, "argv", argv)
    assert cli._command() == (
        "cadence-bench grid harness/recipes/cifar10_fast.toml --records method_cards/runs --data-dir /elsewhere/data"
    )
    # the project's data beside the repository, as its README tells to pass it (a run of 2026-11-27 recorded it
    # absolute, and its card showed a command that works on one machine only)
    argv[-1] = str(REPO_ROOT.parent / "shared" / "data")
    assert cli._command().endswith("--records method_cards/runs --data-dir ../shared/data")


def test_the_demo_runs_its_grid_in_this_process_unless_told_to_isolate(
    counted: list[int], tiny_recipe: Any, tracking_uri: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the demo's short runs would otherwise pay a process start (its interpreter, imports, MLflow store)."""
    import os

    from cadence_harness import demo
    from cadence_harness.cli_parser import build_parser

    recipe = tiny_recipe(name="demo-tiny", methods={"count": {}}, grid={"arms": ["baseline", "each"]})
    monkeypatch.setattr(demo, "demo_recipe", lambda data_dir=None: (recipe, "the tiny recipe"))
    assert main(["demo", "--out", str(tmp_path / "demo"), "--tracking-uri", tracking_uri]) == 0
    # built by the grid's validation, then by the count arm's run: here too (a worker's would not be listed)
    assert counted == [os.getpid(), os.getpid()]
    assert build_parser().parse_args(["demo"]).isolate is False
    assert build_parser().parse_args(["demo", "--isolate"]).isolate is True


def test_a_failed_demo_run_is_found_where_it_was_recorded(
    explode_plugin: Any,
    tiny_recipe: Any,
    tracking_uri: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In process a run writes no log file: its error is in its FAILED MLflow run, and the demo says so."""
    from cadence_harness import demo

    monkeypatch.setenv("CADENCE_TEST_EXPLODE", "1")
    methods = {"explode": {"on_seed": 0, "how": "raise"}}
    recipe = tiny_recipe(name="demo-explodes", methods=methods, grid={"arms": ["each"]})
    monkeypatch.setattr(demo, "demo_recipe", lambda data_dir=None: (recipe, "a recipe whose run fails"))
    assert main(["demo", "--out", str(tmp_path / "demo"), "--tracking-uri", tracking_uri]) == 1
    assert f"1 run(s) failed; their errors are in their FAILED runs in {tracking_uri}" in capsys.readouterr().err


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_a_run_on_a_gpu_first_warms_its_process_up_in_no_recorded_run(
    device: str, monkeypatch: pytest.MonkeyPatch, tiny_recipe_file: Any, tracking_uri: str
) -> None:
    # On an H200 the first run of a process trained 6.9 s where the runs after it took 2.3-2.9 s (CUDA and cuDNN
    # start-up, first kernels): an in-process grid warms up first, and so does `run` with its seeds. There is no
    # GPU here, so the device checks and the runs are stand-ins; what is checked is the order of the calls.
    import torch

    from cadence_harness.running import preflight, run, runners, scale_out

    calls: list[tuple[str, int]] = []
    metrics = {"final/accuracy": 0.5, "final/train_s": 1.0, "final/flops": 1.0}
    monkeypatch.setattr(preflight, "require_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(scale_out, "require_processes", lambda nproc, device: None)
    monkeypatch.setattr(runners, "warm_up_process", lambda spec, **kw: calls.append(("warm-up", spec.seed)) or 1.0)
    monkeypatch.setattr(
        run, "execute", lambda spec, **kw: calls.append(("run", spec.seed)) or run.RunResult("id", metrics, "")
    )
    command = ["run", tiny_recipe_file(device=device), "--seeds", "2", "--tracking-uri", tracking_uri, "--no-progress"]
    assert main(command) == 0
    assert calls == [*([("warm-up", 0)] if device == "gpu" else []), ("run", 0), ("run", 1)]
