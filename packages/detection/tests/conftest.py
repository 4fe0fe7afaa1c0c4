from __future__ import annotations

from pathlib import Path

import pytest

from cadence_detection import make_shapes_dataset


@pytest.fixture(scope="session")
def shapes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny shapes set on disk: 8 training and 4 validation images of 64 pixels."""
    return make_shapes_dataset(tmp_path_factory.mktemp("shapes"), num_train=8, num_val=4, image_size=64)
