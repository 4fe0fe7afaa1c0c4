"""The core's wheel carries what an installed cadence needs beyond its modules."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

CORE = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_py_typed_so_type_checkers_read_cadences_hints(tmp_path: Path) -> None:
    """PEP 561: without ``py.typed`` in the installed package, mypy and pyright treat cadence as untyped."""
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "--wheel-dir", str(tmp_path), str(CORE)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("cadence-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cadence/py.typed" in names
    assert "cadence/trainer.py" in names
