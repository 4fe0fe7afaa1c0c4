"""SqueezeExcite adapter: INIT only, the report logged, checkpoints that need the same surgery."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_squeeze_excite import SqueezeExcite, SqueezeExciteConv2d

from cadence import Classifier, Event, InMemoryLogger, Resource, Trainer
from cadence.testing import image_dataset, sgd_trainer


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = Classifier(torchvision.models.resnet18(num_classes=4), num_classes=4)
    return sgd_trainer(model, image_dataset(8, 4), algorithms, lr=0.01, seed=1, shuffle=False, **kwargs)


def test_declarations() -> None:
    algorithm = SqueezeExcite()
    assert algorithm.events == (Event.INIT,) and algorithm.required_on_load()
    assert algorithm.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}
    assert repr(algorithm) == "SqueezeExcite(latent_channels=64, min_channels=128, strict=False)"


def test_the_trainer_applies_it_and_logs_the_report() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([SqueezeExcite(latent_channels=0.25)], loggers=[logger])
    assert isinstance(trainer.state.model.module.layer4[0].conv2, SqueezeExciteConv2d)
    assert logger.hyperparameters == {
        "SqueezeExcite/Conv2d to SqueezeExciteConv2d": 13,  # the report
        "squeeze_excite/num_squeeze_excite_layers": 13,  # Composer's key
    }
    optimizer_params = {id(p) for group in trainer.state.optimizers[0].param_groups for p in group["params"]}
    assert optimizer_params == {id(p) for p in trainer.state.model.parameters()}


def test_a_checkpoint_after_surgery_needs_the_same_surgery(tmp_path: Path) -> None:
    trained = _trainer([SqueezeExcite(latent_channels=16)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([SqueezeExcite(latent_channels=16)], load_path=checkpoint)
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(trained.state.model.eval().module(x), resumed.state.model.eval().module(x))
    with pytest.raises(RuntimeError, match=r"written after SqueezeExcite\(latent_channels=16") as refused:
        _trainer([], load_path=checkpoint)
    assert type(refused.value).__name__ == "CheckpointMismatchError"
    with pytest.raises(RuntimeError, match=r"this run applies SqueezeExcite\(latent_channels=32"):
        _trainer([SqueezeExcite(latent_channels=32)], load_path=checkpoint)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"latent_channels": -1}, "`latent_channels`"),
        ({"latent_channels": True}, "`latent_channels`"),
        ({"latent_channels": 2.5}, "`latent_channels`=2.5"),
        ({"min_channels": "128"}, "`min_channels`"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SqueezeExcite(**kwargs)
