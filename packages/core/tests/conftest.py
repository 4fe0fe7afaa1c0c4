from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from cadence.registry import registry
from cadence.testing import digits_datasets

SHARED_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"


@pytest.fixture
def digits_loaders() -> tuple[DataLoader, DataLoader]:
    train, test = digits_datasets()
    return DataLoader(train, batch_size=32, shuffle=True), DataLoader(test, batch_size=100)


@pytest.fixture
def tiny_npz() -> Path:
    path = SHARED_DATA / "tiny.npz"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not on this machine)")
    return path


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` for `cadence.testing.write_plugin_distribution`; the registry and the plugins'
    modules are forgotten before and after, so every test sees only what it installed."""
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.cache_clear()
    importlib.invalidate_caches()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("cadence_test_", "broken_plugin", "broken_logger"))]:
        del sys.modules[name]
    registry.cache_clear()
    importlib.invalidate_caches()
