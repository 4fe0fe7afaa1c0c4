"""The command line: errors name the bad key and exit 2; dry runs list a grid; methods are listed."""

from __future__ import annotations

from typing import Any

import pytest

from cadence.registry import registry
from cadence_harness.cli import main
from cadence_harness.demo import demo_recipe


def test_grid_dry_run_lists_runs_with_their_hashes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "cifar10_resnet20", "--dry-run", "--seeds", "2", "--arms", "baseline"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "4 runs" and lines[0].startswith("baseline-s0") and "label_smoothing+cutout-s1" in lines[-2]


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


def test_methods_lists_every_installed_method(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in registry().methods)


def test_demo_uses_cifar10_when_present_else_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    from cadence_harness import demo

    def missing(*args: Any) -> Any:
        raise demo.DataNotFoundError("no")

    monkeypatch.setattr(demo, "find_dataset_files", missing)
    recipe, note = demo_recipe()
    assert recipe.data == "digits" and "digits" in note and "CIFAR-10 was not found" in note
    assert recipe.seeds == (0,) and recipe.device == "cpu" and recipe.grid["arms"] == ["baseline", "each"]
