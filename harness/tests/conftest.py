"""Fixtures for the harness tests: a throw-away MLflow store, tiny recipes, installed methods."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cadence.registry import registry
from cadence_harness.recipe import Recipe, parse_recipe

PLUGINS = Path(__file__).parent / "plugins"

# Methods that work with their defaults on (image, label) tuple batches of a CNN, cheapest first.
IMAGE_METHODS = ["label_smoothing", "mixup", "cutout", "cutmix", "colout", "blurpool", "channels_last", "randaugment"]
# Methods that do not care what the model or the batch is (for the hf/ family).
MODEL_AGNOSTIC_METHODS = ["gradient_clipping", "ema", "decoupled_weight_decay"]


@pytest.fixture
def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture
def image_methods() -> list[str]:
    installed = [m for m in IMAGE_METHODS if m in registry().methods]
    if len(installed) < 2:
        pytest.skip(f"needs two installed image methods of {IMAGE_METHODS}; installed: {sorted(registry().methods)}")
    return installed[:2]


@pytest.fixture
def explode_plugin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make the test-only methods (`explode`, `tuples_only`, `count`) discoverable, here and in worker processes."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    registry.cache_clear()
    yield
    monkeypatch.undo()
    registry.cache_clear()


@pytest.fixture
def counted(explode_plugin: Any) -> list[int]:
    """The test method `count` is installed; the list records each construction (the process id)."""
    from cadence_test_plugins.count import Count

    Count.built.clear()
    return Count.built


# ResNet-20 on 8 synthetic 32x32 images, 2 batches of 4: seconds per run on a CPU.
TINY: dict[str, Any] = {
    "name": "tiny",
    "model": "tv/resnet20",
    "data": "synthetic",
    "subset": 8,
    "eval_subset": 8,
    "duration": "2ba",
    "batch_size": 4,
    "eval_interval": "1ep",
    "target_accuracy": 0.05,
    "optimizer": {"name": "sgd", "lr": 0.05},
}


def make_tiny_recipe(**changes: Any) -> Recipe:
    """The tiny recipe, validated, with `changes`."""
    return parse_recipe({**TINY, **changes}, source="test")


@pytest.fixture
def tiny_recipe_file(tmp_path: Path) -> Any:
    """A factory: ``tiny_recipe_file(**changes)`` writes the tiny recipe as a file for the command line
    (JSON, which YAML reads) and returns its path."""

    def write(**changes: Any) -> str:
        path = tmp_path / "tiny.yaml"
        path.write_text(json.dumps({**TINY, **changes}))
        return str(path)

    return write


@pytest.fixture
def tiny_recipe() -> Any:
    """A factory: ``tiny_recipe(**changes)`` builds a validated tiny recipe."""
    return make_tiny_recipe
