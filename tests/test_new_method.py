"""`make new-method NAME=...`: the scaffold is a method package that passes conformance and fails loudly."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _scaffold_module():
    spec = importlib.util.spec_from_file_location("new_method", ROOT / "packages" / "methods" / "new_method.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _env(package: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(package / "src"), os.environ.get("PYTHONPATH", "")])}


def test_the_scaffold_passes_conformance_and_fails_until_implemented(tmp_path: Path) -> None:
    package = _scaffold_module().scaffold("demo_thing", tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(package), str(package / "tests")],
        capture_output=True, text=True, env=_env(package), timeout=300,
    )  # fmt: skip
    summary = result.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1 failed, (\d+) passed\b", summary), result.stdout[-3000:]
    assert "FAILED" in result.stdout and "test_the_method_is_implemented" in result.stdout
    assert "is still the scaffold's placeholder" in result.stdout
    assert "TestDemoThingConformance" not in "".join(
        line for line in result.stdout.splitlines() if line.startswith("FAILED")
    ), "the conformance suite must pass on the scaffold"


def test_the_scaffold_is_a_well_formed_method_package(tmp_path: Path) -> None:
    package = _scaffold_module().scaffold("demo_thing", tmp_path)
    meta = tomllib.loads((package / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "cadence-demo-thing" and meta["project"]["readme"] == "card.md"
    assert meta["project"]["entry-points"]["cadence.methods"] == {"demo_thing": "cadence_demo_thing:DemoThing"}
    card = (package / "card.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    template = yaml.safe_load((ROOT / "method_cards" / "TEMPLATE.md").read_text().split("---\n")[1])
    assert set(front) == set(template)
    assert front["name"] == "DemoThing" and front["events"] == ["init", "after_dataloader"]
    code = "\n".join(re.findall(r"```python\n(.*?)```", card, re.S))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(package))
    assert result.returncode == 0, result.stderr  # the card's code blocks run
    for command in (["check"], ["format", "--check"]):  # `make lint` passes on a fresh scaffold
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--config", str(ROOT / "pyproject.toml"), str(package)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("name", ["StochasticDepth", "1st", "class", "a-b", ""])
def test_bad_names_and_existing_folders_are_refused(tmp_path: Path, name: str) -> None:
    scaffold = _scaffold_module()
    with pytest.raises(ValueError, match="snake_case"):
        scaffold.scaffold(name, tmp_path)
    scaffold.scaffold("taken", tmp_path)
    with pytest.raises(FileExistsError, match="already exists"):
        scaffold.scaffold("taken", tmp_path)
