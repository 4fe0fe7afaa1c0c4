"""A checkpoint written after several surgeries loads into a fresh, unmodified torchvision ResNet-18:
the trainer re-applies the recorded surgeries, in the plan's order, before the weights load. Without
the methods, the load is refused naming each one to add."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cadence import CheckpointMismatchError, Classifier, Trainer
from cadence.registry import registry
from cadence.testing import image_dataset, sgd_trainer

SURGERIES = {"blurpool": {}, "squeeze_excite": {"latent_channels": 16}, "ghost_batchnorm": {"ghost_batch_size": 2}}


def _surgeries() -> list:
    missing = sorted(set(SURGERIES) - set(registry().methods))
    if missing:
        pytest.skip(f"needs the method packages {missing}")
    return [registry().method(name).algorithm(**kwargs) for name, kwargs in SURGERIES.items()]


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = Classifier(torchvision.models.resnet18(num_classes=4), num_classes=4)  # fresh: built by user code
    return sgd_trainer(model, image_dataset(8, 4), algorithms, lr=0.05, seed=3, shuffle=False, **kwargs)


def test_a_checkpoint_after_three_surgeries_loads_into_a_fresh_resnet18(tmp_path: Path) -> None:
    trained = _trainer(_surgeries(), save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    loaded = _trainer(_surgeries(), load_path=checkpoint)
    x = torch.rand(4, 3, 32, 32)
    expected, got = trained.state.model.eval().module(x), loaded.state.model.eval().module(x)
    assert torch.equal(expected, got)
    kinds = {type(m).__name__ for m in loaded.state.model.modules()}
    assert {"BlurConv2d", "SqueezeExciteConv2d", "GhostBatchNorm2d"} <= kinds
    trained_state, loaded_state = trained.state.optimizers[0].state_dict(), loaded.state.optimizers[0].state_dict()
    assert len(loaded_state["state"]) == len(trained_state["state"]) > 0  # momentum of every surviving parameter


def test_without_the_methods_the_load_names_each_one_to_add(tmp_path: Path) -> None:
    _trainer(_surgeries(), save_folder=tmp_path, save_interval="2ba").fit()
    with pytest.raises(CheckpointMismatchError) as refused:
        _trainer([], load_path=tmp_path / "ep0-ba2.pt")
    message = str(refused.value)
    for call in (
        "BlurPool(",
        "SqueezeExcite(latent_channels=16",
        "GhostBatchNorm(ghost_batch_size=2",
        "cadence_blurpool",
    ):
        assert call in message, message
