"""`harness/device_copy.sh`: the checkout trimmed to fit a lent GPU machine's copy limit, then put back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "harness" / "device_copy.sh"


def _git(folder: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-C", str(folder), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A shallow clone of this repository with the working tree's device_copy.sh committed in it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this repository's history (not an sdist)")
    folder = tmp_path / "clone"
    cloned = subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(folder)], capture_output=True, text=True
    )
    if cloned.returncode != 0:  # e.g. git's "dubious ownership" refusal where another user owns the checkout
        pytest.skip(f"git could not clone this repository: {cloned.stderr.strip()[:200]}")
    shutil.copy(SCRIPT, folder / "harness" / "device_copy.sh")
    _git(folder, "add", "harness/device_copy.sh")
    _git(folder, "commit", "-q", "--allow-empty", "-m", "this tree's device_copy.sh")
    return folder


def _run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "harness/device_copy.sh", command], cwd=folder, capture_output=True, text=True)


def test_trim_leaves_only_what_runs_in_the_copy_and_restore_brings_back_the_commit(clone: Path) -> None:
    card = clone / "packages" / "methods" / "mixup" / "card.md"
    committed_card = card.read_text()
    trimmed = _run(clone, "trim")
    assert trimmed.returncode == 0, trimmed.stderr
    assert "fits" in trimmed.stdout
    copied = set(_git(clone, "ls-files").split()) | set(
        _git(clone, "ls-files", "--others", "--exclude-standard").split()
    )
    assert not any(path.startswith("method_cards/") or "/tests/" in path for path in copied)
    assert "harness/src/cadence_harness/running/run.py" in copied and "harness/recipes/cifar10_fast.toml" in copied
    assert "packages/methods/mixup/pyproject.toml" in copied and "packages/methods/mixup/card.md" in copied
    assert card.read_text().count("\n") == 1  # the metadata's readme still exists, one line long
    assert (clone / "method_cards").is_dir()  # out of the copy, not deleted
    assert _run(clone, "trim").returncode == 1  # twice is refused
    restored = _run(clone, "restore")
    assert restored.returncode == 0, restored.stderr
    assert _git(clone, "status", "--porcelain") == ""
    assert card.read_text() == committed_card
    assert "device_copy.sh" not in (clone / ".git" / "info" / "exclude").read_text()


def test_trim_refuses_uncommitted_changes_that_restore_would_overwrite(clone: Path) -> None:
    readme = clone / "README.md"
    readme.write_text(readme.read_text() + "\nwork in progress\n")
    refused = _run(clone, "trim")
    assert refused.returncode == 1 and "uncommitted changes" in refused.stderr
    assert readme.read_text().endswith("work in progress\n")
    assert _run(clone, "nonsense").returncode == 2
