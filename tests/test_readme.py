"""README.md's Python example runs as written, and `make help` lists every target."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs() -> None:
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
