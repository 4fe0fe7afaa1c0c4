"""Fixtures for the harness tests: a throw-away MLflow store, tiny recipes, installed methods."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from cadence.loggers import MLFlowLogger
from cadence.registry import registry
from cadence_harness.running.recipe import Recipe, parse_recipe
from cadence_harness.running.runspec import RunSpec

PLUGINS = Path(__file__).parent / "plugins"

# Methods that work with their defaults on (image, label) tuple batches of a CNN, cheapest first.
IMAGE_METHODS = ["label_smoothing", "mixup", "cutout", "cutmix", "colout", "blurpool", "channels_last", "randaugment"]
# Methods that do not care what the model or the batch is (for the hf/ family).
MODEL_AGNOSTIC_METHODS = ["gradient_clipping", "ema", "decoupled_weight_decay"]


@pytest.fixture(autouse=True)
def no_resident_data() -> Any:
    """Each test loads its data itself: the process-wide resident cache (in-process grids) starts empty."""
    from cadence_harness.running import resident

    resident.clear()
    yield
    resident.clear()


@pytest.fixture(autouse=True)
def records_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run records the command line writes go to a temporary folder, never to the repository's method_cards/runs."""
    folder = tmp_path / "records"
    monkeypatch.setenv("CADENCE_RECORDS", str(folder))
    return folder


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


# Runs written into a store the way `run.execute` writes them (tags, params, evaluations, final metrics),
# without training: reports and records are checked against known numbers.
RUN_PARAMS = {
    "model": "tv/resnet20",
    "data": "digits",
    "batch_size": 32,
    "device_name": "test cpu",
    "cpu_threads": 2,
    "python": "3.11",
    "precision": "fp32",
    "versions.torch": "2.x",
    "git_sha": "abc",
}


def log_run(
    uri: str,
    spec: RunSpec,
    accuracy: float,
    cost: float,
    *,
    params: Mapping[str, Any] | None = None,
    command: str = "cadence-bench grid known.toml",
    cycles: Sequence[tuple[float, float]] = (),
) -> str:
    """One finished run of `spec`: `accuracy` at its end after `cost` seconds of training (1e9·`cost` FLOPs), and
    two evaluations; for a cyclic run, an evaluation at each cycle's end with its (accuracy, cost so far) from
    `cycles`, the last being the run's end."""
    logger = MLFlowLogger(
        experiment_name=spec.experiment,
        run_name=spec.run_name,
        tracking_uri=uri,
        tags={**spec.tags(), "cadence.command": command},
    )
    logger.log_hyperparameters(
        {**RUN_PARAMS, "duration": spec.recipe.duration, "subset": spec.recipe.subset, **(params or {})}
    )
    points = [(accuracy - 0.1, cost * 0.5, {}), (accuracy, cost, {})]
    if cycles:
        points = [(acc, spent, {"curve/cycle_end": float(i)}) for i, (acc, spent) in enumerate(cycles, 1)]
        accuracy, cost = cycles[-1]
    for step, (acc, spent, extra) in enumerate(points, 1):
        logger.log_metrics(
            {
                "metrics/eval/MulticlassAccuracy": acc,
                "time/train_s": spent,
                "time/cpu_s": 2 * spent,
                "cost/flops": 1e9 * spent,
                **extra,
            },
            step=5 * step,
        )
    final = {
        "final/accuracy": accuracy,
        "final/train_s": cost,
        "final/cpu_s": 2 * cost,
        "final/flops": 1e9 * cost,
        "final/wall_s": cost + 1,
        "final/samples_per_s": 1000 / cost,
        "final/peak_memory_mb": 100.0,
    }
    logger.log_metrics(final, step=5 * len(points))
    logger.finish("FINISHED")
    return str(logger.run_id)


@pytest.fixture(scope="session")
def run_logger() -> Any:
    """`log_run(uri, spec, accuracy, cost, params=..., command=...)`: one finished run, without training."""
    return log_run


def log_study(uri: str, recipe: Recipe, known: Mapping[tuple[str, str], tuple[float, float]]) -> None:
    """Every run of `recipe`'s grid, from `known` (arm, budget) -> (accuracy, cost): seeds 0, 1, 2 add 0, +0.01,
    -0.01 to the accuracy and 0, 5, 10 % to the cost."""
    from cadence_harness.running.plan import expand

    for spec in expand(recipe):
        accuracy, cost = known[(spec.arm_name, spec.recipe.duration)]
        log_run(uri, spec, accuracy + (0, 0.01, -0.01)[spec.seed], cost * (1 + 0.05 * spec.seed))


@pytest.fixture(scope="session")
def study_logger() -> Any:
    """`log_study(uri, recipe, known)`: every run of a grid with known numbers, without training."""
    return log_study


def fit_linear(callbacks: Sequence[Any], batches: int = 4, evaluate: bool = True) -> Any:
    """A 4-in, 2-out linear classifier trained `batches` steps of 4 samples (evaluated every 2 steps on the same
    16), with `callbacks` in that order; closed even when the fit raises. Returns the Trainer."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from cadence import Classifier, Trainer

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    model = Classifier(torch.nn.Linear(4, 2), 2)
    evaluation = {"eval_dataloader": DataLoader(data, batch_size=8), "eval_interval": "2ba"} if evaluate else {}
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        max_duration=f"{batches}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=list(callbacks),
        progress_bar=False,
        seed=0,
        **evaluation,
    )
    try:
        trainer.fit()
    finally:
        trainer.close()
    return trainer


@pytest.fixture(scope="session")
def linear_fit() -> Any:
    """`fit_linear(callbacks, batches=4, evaluate=True)`: a tiny classifier's fit with these callbacks."""
    return fit_linear


def write_jpeg_archive(folder: Path, train: int = 96, test: int = 32) -> Path:
    """A cifar10_jpeg.npz in the real file's layout (see shared/data/README.md): smooth random 32x32 images as
    JPEG q75, every eighth one greyscale (decoded to RGB like the rest)."""
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {"classes": np.array([f"class{i}" for i in range(10)])}
    for split, count in (("train", train), ("test", test)):
        jpegs = []
        for i, coarse in enumerate(rng.integers(0, 256, size=(count, 8, 8, 3), dtype=np.uint8)):
            image = Image.fromarray(coarse).resize((32, 32), Image.Resampling.BILINEAR)
            handle = io.BytesIO()
            (image.convert("L") if i % 8 == 7 else image).save(handle, format="JPEG", quality=75)
            jpegs.append(np.frombuffer(handle.getvalue(), dtype=np.uint8))
        arrays[f"jpeg_{split}"] = np.concatenate(jpegs)
        arrays[f"offsets_{split}"] = np.cumsum([0] + [len(j) for j in jpegs], dtype=np.int64)
        arrays[f"y_{split}"] = np.arange(count, dtype=np.int64) % 10
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "cifar10_jpeg.npz", **arrays)
    return folder


@pytest.fixture
def jpeg_archive() -> Any:
    """`write_jpeg_archive(folder, train=96, test=32)`: a small cifar10_jpeg.npz in the real file's layout."""
    return write_jpeg_archive
