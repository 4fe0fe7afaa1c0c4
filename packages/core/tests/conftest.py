from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils.data import DataLoader

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
