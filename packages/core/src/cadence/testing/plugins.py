"""Installing a plugin for a test: a distribution's metadata written to a folder on ``sys.path``, which
``importlib.metadata`` then finds as an installed package with entry points (no pip, no build)."""

from __future__ import annotations

import textwrap
from pathlib import Path

__all__ = ["write_plugin_distribution"]


def write_plugin_distribution(
    root: Path, dist: str, entry_points: str, module: str | None = None, code: str = "", *, group: str
) -> None:
    """Write distribution `dist` under `root` with `entry_points` (``name = module:attr`` lines) in the
    entry-point `group` (``cadence.methods``, ``cadence.loggers``), and with `module` holding `code` (dedented)."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry_points}\n")
    if module:
        (root / module).mkdir()
        (root / module / "__init__.py").write_text(textwrap.dedent(code))
