"""Every bad input is refused before anything trains: one line on stderr naming the fix, exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from cadence.registry import registry
from cadence_harness.cli import main
from cadence_harness.running.grid import run_grid

NO_CUDA = "CUDA is not available on this machine; use --device cpu"


def refused(capsys: pytest.CaptureFixture[str], command: str, argv: list[str]) -> str:
    """Run the command line; it must exit 2 with one line on stderr, which is returned."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cadence-bench {command}: "), lines
    return lines[0]


def nothing_logged(tmp_path: Path) -> bool:
    return not (tmp_path / "mlflow.db").exists() and not (tmp_path / "logs").exists()


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_gpu_without_cuda_is_refused_at_once(
    capsys: pytest.CaptureFixture[str], no_cuda: None, tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    common = ["--device", "gpu", "--tracking-uri", tracking_uri]
    assert NO_CUDA in refused(capsys, "run", ["run", tiny_recipe_file(), *common])
    grid = ["grid", tiny_recipe_file(), *common, "--log-dir", str(tmp_path / "logs")]
    assert NO_CUDA in refused(capsys, "grid", grid)
    assert nothing_logged(tmp_path)

    assert main([*grid, "--dry-run"]) == 0  # a dry run lists the runs, and says they would be refused here
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "1 runs"
    (warning,) = err.strip().splitlines()
    assert warning.startswith("cadence-bench grid: warning: these runs would be refused on this machine: ")
    assert NO_CUDA in warning


def test_methods_that_cannot_apply_are_refused_before_training(
    capsys: pytest.CaptureFixture[str], explode_plugin: Any, tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    text = {"model": "hf/bert-tiny", "data": "synthetic_text", "max_length": 16}
    expected = "TuplesOnly reads batch[1], but the batches are dicts with keys 'input_ids', 'attention_mask', 'labels'"
    run = ["run", tiny_recipe_file(**text), "--methods", "tuples_only", "--tracking-uri", tracking_uri]
    assert expected in refused(capsys, "run", run)

    grid = tiny_recipe_file(**text, grid={"arms": ["baseline", "each"], "methods": ["tuples_only"]})
    line = refused(capsys, "grid", ["grid", grid, "--tracking-uri", tracking_uri, "--log-dir", str(tmp_path / "logs")])
    assert expected in line and line.endswith("(in the grid's arms tuples_only)")
    assert nothing_logged(tmp_path)  # no run was created, no worker started


def test_a_refused_grid_starts_no_worker(explode_plugin: Any, tiny_recipe: Any, tmp_path: Path) -> None:
    from cadence import NotApplicableError

    methods = {"tuples_only": {}, "explode": {}}
    text = {"model": "hf/bert-tiny", "data": "synthetic_text", "max_length": 16}
    recipe = tiny_recipe(**text, grid={"arms": ["each", "pairs"]}, methods=methods)
    with pytest.raises(NotApplicableError, match=r"in the grid's arms tuples_only, tuples_only\+explode\)$"):
        run_grid(recipe, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", log_dir=tmp_path / "logs", progress=False)
    assert nothing_logged(tmp_path)


# The real method's own check_applicable (in packages/methods/label_smoothing), through the same path.
def test_label_smoothing_on_a_text_model_is_refused(
    capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    if "label_smoothing" not in registry().methods:
        pytest.skip("label_smoothing is not installed")
    text = tiny_recipe_file(model="hf/bert-tiny", data="synthetic_text", max_length=16)
    line = refused(capsys, "run", ["run", text, "--methods", "label_smoothing", "--tracking-uri", tracking_uri])
    assert "LabelSmoothing reads the class targets at target_key=1, but the batches are dicts" in line
    assert "labels (Tensor 4 int64)" in line  # a training batch (batch_size 4), not an evaluation batch
    assert nothing_logged(tmp_path)


def test_a_surgery_that_would_change_nothing_is_refused_not_run_as_a_disguised_baseline(
    capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    if "blurpool" not in registry().methods:
        pytest.skip("blurpool is not installed")
    text = tiny_recipe_file(model="hf/bert-tiny", data="synthetic_text", max_length=16)
    for command in ("run", "grid"):
        argv = [command, text, "--methods", "blurpool", "--tracking-uri", tracking_uri]
        argv += ["--log-dir", str(tmp_path / "logs")] if command == "grid" else []
        line = refused(capsys, command, argv)
        assert "blurpool would change nothing in this model (BlurPool changed no module of HuggingFaceModel" in line
        assert "leave blurpool out of the arms for this model" in line
    assert nothing_logged(tmp_path)


def test_a_data_dir_that_is_not_a_folder_is_refused(
    capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any, tmp_path: Path
) -> None:
    missing = str(tmp_path / "nonexistent")
    expected = f"`--data-dir` {missing!r} does not exist; pass the folder that holds the dataset files"
    assert expected in refused(capsys, "run", ["run", tiny_recipe_file(), "--data-dir", missing])
    assert expected in refused(capsys, "grid", ["grid", tiny_recipe_file(), "--data-dir", missing])
    assert expected in refused(capsys, "demo", ["demo", "--data-dir", missing, "--out", str(tmp_path / "demo")])
    assert "is a file, not a folder" in refused(capsys, "run", ["run", tiny_recipe_file(), "--data-dir", __file__])


@pytest.mark.parametrize("recipe", ["cifar10_resnet20", "fashion_mnist_resnet20"])
def test_methods_on_the_command_line_replace_installed_and_its_exclude(
    capsys: pytest.CaptureFixture[str], image_methods: list[str], recipe: str
) -> None:
    if "cutout" not in registry().methods:
        pytest.skip("cutout is not installed")
    methods = list(dict.fromkeys([*image_methods, "cutout"]))  # the recipe's combination label_smoothing+cutout runs
    assert main(["grid", recipe, "--methods", ",".join(methods), "--arms", "each", "--dry-run"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert {name.rsplit("-s", 1)[0] for name in names} == {*methods, "label_smoothing+cutout"}


def test_misspelled_names_get_the_close_match(capsys: pytest.CaptureFixture[str], explode_plugin: Any) -> None:
    flags = ["run", "--model", "tv/resnet20", "--data", "synthetic", "--duration", "1ba"]
    line = refused(capsys, "run", [*flags, "--methods", "explodee"])
    assert "`methods.explodee`: no installed method named 'explodee'; did you mean 'explode'?" in line
    assert "pip install" not in line  # it is installed, under another spelling
    assert "did you mean 'cifar10'?" in refused(capsys, "run", [*flags[:-4], "--data", "cifar1O", "--duration", "1ba"])
    model = ["run", "--model", "tv/resnet2O", "--data", "synthetic", "--duration", "1ba"]
    assert "did you mean 'tv/resnet20'?" in refused(capsys, "run", model)
    model[2] = "tc/resnet20"
    assert "did you mean 'tv/resnet20'?" in refused(capsys, "run", model)
    model[2] = "hf/bert-tine"
    assert "did you mean 'hf/bert-tiny'?" in refused(capsys, "run", model)
    line = refused(capsys, "grid", ["grid", "cifar10_resnet2", "--dry-run"])
    assert "recipe 'cifar10_resnet2' is not a file nor a shipped recipe; did you mean 'cifar10_resnet20'? " in line


def test_a_misspelled_real_method_gets_the_close_match(
    capsys: pytest.CaptureFixture[str], image_methods: list[str]
) -> None:
    method = image_methods[0]
    flags = ["run", "--model", "tv/resnet20", "--data", "synthetic", "--duration", "1ba", "--methods", method + "x"]
    assert f"did you mean {method!r}?" in refused(capsys, "run", flags)


def test_spellings_of_a_method_are_one_arm(
    capsys: pytest.CaptureFixture[str], explode_plugin: Any, tiny_recipe_file: Any
) -> None:
    listings = []
    for spelling in ("tuples_only", "TuplesOnly", "tuples-only", "Tuples_Only"):
        assert (
            main(
                ["grid", tiny_recipe_file(), "--methods", spelling, "--combination", f"explode+{spelling}", "--dry-run"]
            )
            == 0
        )
        listings.append(capsys.readouterr().out)
    assert len(set(listings)) == 1 and "tuples_only-s0" in listings[0] and "explode+tuples_only-s0" in listings[0]
    with_table = tiny_recipe_file(methods={"TuplesOnly": {}}, grid={"arms": ["each"], "methods": ["tuples_only"]})
    assert main(["grid", with_table, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == listings[0].splitlines()[1]
    assert refused(capsys, "run", ["run", tiny_recipe_file(), "--methods", "tuples_only,TuplesOnly"]).endswith(
        "lists 'tuples_only' twice (as 'tuples_only' and 'TuplesOnly')"
    )


def test_methods_that_cannot_run_together_are_refused_before_any_run(
    capsys: pytest.CaptureFixture[str], tiny_recipe_file: Any, tracking_uri: str, tmp_path: Path
) -> None:
    if not {"mixup", "cutmix"} <= set(registry().methods):
        pytest.skip("mixup and cutmix are not installed")
    conflict = ["--methods", "mixup,cutmix", "--set", "mixup.interpolate_loss=true", "--tracking-uri", tracking_uri]
    line = refused(capsys, "run", ["run", tiny_recipe_file(), *conflict])
    assert "the arm mixup+cutmix: MixUp and CutMix cannot be used together. Fix: MixUp(interpolate_loss=True)" in line
    grid = tiny_recipe_file(grid={"arms": ["each"], "combinations": [["mixup", "cutmix"]]})
    argv = ["grid", grid, "--set", "mixup.interpolate_loss=true", "--tracking-uri", tracking_uri]
    line = refused(capsys, "grid", [*argv, "--methods", "mixup,cutmix", "--log-dir", str(tmp_path / "logs")])
    assert "the arm mixup+cutmix: MixUp and CutMix cannot be used together" in line
    assert nothing_logged(tmp_path)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--in-process", "--jobs", "2"], "`--in-process` with --jobs 2: in-process runs cannot be timed out or run "
         "in parallel (this one process runs them one after another); drop --jobs, or --in-process"),
        (["--in-process", "--timeout", "10"], "`--in-process` with --timeout 10: in-process runs cannot be timed out"),
        (["--in-process", "--timeout", "10", "--search"], "drop --timeout, or --in-process"),  # before the search
        (["--jobs", "0"], "argument --jobs: '0': must be an int >= 1; see `cadence-bench grid --help`"),
        (["--jobs", "1.5"], "argument --jobs: '1.5': must be an int >= 1"),
        (["--time-limit", "-5"], "argument --time-limit: '-5': must be a number of seconds > 0"),
        (["--timeout", "nan"], "argument --timeout: 'nan': must be a number of seconds > 0"),
        (["--estimate", "--rate", "-1"], "argument --rate: '-1': must be a number of GFLOP/s > 0"),
        (["--rate", "50"], "`--rate` = 50: only --estimate reads it; add --estimate, or drop --rate"),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),  # argparse's own refusals: one line too
    ],
)  # fmt: skip
def test_grid_flags_that_cannot_work_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
    tiny_recipe_file: Any,
    tracking_uri: str,
    tmp_path: Path,
    flags: list[str],
    expected: str,
) -> None:
    argv = ["grid", tiny_recipe_file(), "--tracking-uri", tracking_uri, "--log-dir", str(tmp_path / "logs"), *flags]
    assert expected in refused(capsys, "grid", argv)
    assert nothing_logged(tmp_path)


def test_counts_of_the_reading_commands_are_refused_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["report", "--study", "cifar10_resnet20_study"], ["spread", "cifar10_fast"]):
        line = refused(capsys, command[0], [*command, "--min-seeds", "0"])
        assert line == f"cadence-bench {command[0]}: argument --min-seeds: '0': must be an int >= 1; see " + (
            f"`cadence-bench {command[0]} --help`"
        )
    assert refused(capsys, "grid", ["grid"]).startswith("cadence-bench grid: the following arguments are required")
