"""GyroDropout adapter: events, the run's length, checkpoints after surgery, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_gyro_dropout import GyroDropout, GyroDropoutLayer
from torch import nn
from torch.utils.data import DataLoader

import cadence
from cadence import Classifier, Event, MethodError, Resource, State, Trainer
from cadence.testing import assert_same_tensors, image_dataset


def dropout_classifier() -> Classifier:
    module = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                           nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))  # fmt: skip
    return Classifier(module, num_classes=4)


def _trainer(algorithms: list, max_duration: str = "6ba", **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = dropout_classifier()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4),  # 4 batches per epoch
        max_duration=max_duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.05),
        algorithms=algorithms,
        seed=2,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _gyro(trainer: Trainer) -> GyroDropoutLayer:
    return next(m for m in trainer.state.model.modules() if isinstance(m, GyroDropoutLayer))


def test_events_effects_and_repr() -> None:
    algorithm, state = GyroDropout(), State(model=torch.nn.Linear(2, 2), max_duration="4ba")
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT]
    assert algorithm.effects().writes == {Resource.MODEL} and algorithm.required_on_load()
    assert repr(GyroDropout(sigma=1024, tau=8)) == "GyroDropout(p=0.5, sigma=1024, tau=8, seed=None, strict=False)"


@pytest.mark.parametrize(("duration", "epochs"), [("3ep", 3.0), ("6ba", 1.5)])
def test_the_run_length_comes_from_the_loader_and_max_duration(duration: str, epochs: float) -> None:
    layer = _gyro(_trainer([GyroDropout(sigma=4, tau=2)], max_duration=duration))
    assert (layer.iters_per_epoch, layer.max_epoch) == (4, epochs)
    assert layer.period == int(4 * epochs / 4) * 2


def test_a_run_without_a_length_in_batches_is_refused() -> None:
    with pytest.raises(MethodError, match="GyroDropout spreads its masks over the run"):
        _trainer([GyroDropout()], max_duration="64sp")


def test_a_checkpoint_after_surgery_restores_the_sub_networks_and_needs_the_method(tmp_path: Path) -> None:
    trained = _trainer([GyroDropout(sigma=4, tau=2)], save_folder=tmp_path, save_interval="3ba")
    trained.fit()
    resumed = _trainer([GyroDropout(sigma=4, tau=2)], load_path=tmp_path / "ep0-ba3.pt")
    saved = torch.load(tmp_path / "ep0-ba3.pt", weights_only=True)["model"]
    layer = _gyro(resumed)
    assert layer.preselect_masks.shape == (4, 16) and layer.training_step == 3
    assert_same_tensors(layer.preselect_masks, saved["module.6.preselect_masks"], "pool")
    assert torch.equal(layer.preselect_masks, _gyro(trained).preselect_masks)  # drawn once, kept for the run
    with pytest.raises(cadence.CheckpointMismatchError, match=r"add GyroDropout\(p=0.5, sigma=4, tau=2"):
        _trainer([], load_path=tmp_path / "ep0-ba3.pt")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"p": 1}, "`p`=1"), ({"sigma": -3}, "`sigma`=-3"), ({"tau": 0}, "`tau`=0"), ({"seed": "x"}, "`seed`='x'")],
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GyroDropout(**kwargs)
