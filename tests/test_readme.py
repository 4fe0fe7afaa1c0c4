"""README.md's Python example runs as written, and `make help` lists every target."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's tempfile.mkdtemp() goes with the test
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks, "README.md shows a Python example"
    for index, block in enumerate(blocks):
        exec(compile(block, f"README.md[block {index}]", "exec"), {"__name__": "readme"})


def test_make_help_lists_every_target() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M).group(1).split()
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in phony:
        assert f"make {target} " in listed, f"`make help` does not list {target}"


def test_the_install_commands_name_packages_that_exist() -> None:
    """The README's pip commands install from paths of this checkout (the packages are on no index), so each
    path they name must be a package folder here, and none installs a bare `cadence...` name from an index."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0] for line in text.splitlines() if line.lstrip().startswith("pip install ")]
    assert any("./packages/core" in command for command in commands), "README shows the install from the checkout"
    for command in commands:
        for word in command.split()[2:]:
            if word.startswith("./"):
                pattern = word.removeprefix("./").rstrip("/")
                folders = [p for p in ROOT.glob(pattern) if p.is_dir() or not word.endswith("/")] or [ROOT / word]
                assert all((folder / "pyproject.toml").is_file() for folder in folders), f"{word} is not a package"
            elif word.startswith("cadence") and "--find-links" not in command:
                raise AssertionError(f"`{command.strip()}` asks an index for {word}, which no index has")


def test_make_wheels_builds_the_packages_of_this_checkout() -> None:
    """pip reads a bare word such as ``harness`` as a name to fetch from an index (PyPI has an unrelated
    ``harness``), so every package `make wheels` builds must be named as a path of this checkout."""
    commands = subprocess.run(["make", "-n", "wheels"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (command,) = [line for line in commands.splitlines() if " pip wheel " in line]
    members = command.split("--wheel-dir dist", 1)[1].split()
    assert len(members) >= 33 and "./harness" in members
    for member in members:
        assert member.startswith("./") and (ROOT / member / "pyproject.toml").is_file(), member
