"""BlurPool adapter: INIT only, the report logged, checkpoints that need the same surgery."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_blurpool import BlurConv2d, BlurMaxPool2d, BlurPool

from cadence import Classifier, Event, InMemoryLogger, Resource, State, Trainer
from cadence.testing import image_dataset, sgd_trainer


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = Classifier(torchvision.models.resnet18(num_classes=4), num_classes=4)  # as the user's code builds it
    return sgd_trainer(model, image_dataset(8, 4), algorithms, lr=0.01, seed=1, shuffle=False, **kwargs)


def test_runs_on_init_only_and_declares_its_effects() -> None:
    algorithm = BlurPool()
    assert algorithm.events == (Event.INIT,) and algorithm.required_on_load()
    assert algorithm.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}
    assert repr(algorithm) == (
        "BlurPool(replace_convs=True, replace_maxpools=True, blur_first=True, min_channels=16, strict=False)"
    )


class RecordedCalls:
    """A logger that keeps each ``log_hyperparameters`` call apart (InMemoryLogger merges them)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def log_hyperparameters(self, params: dict) -> None:
        self.calls.append(dict(params))


def test_composers_keys_come_in_composers_one_call_then_the_report() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, stride=2), torch.nn.MaxPool2d(2))
    logger = RecordedCalls()
    BlurPool().apply(Event.INIT, State(model=model), logger)
    assert logger.calls == [
        {"blurpool/num_blurpool_layers": 1, "blurpool/num_blurconv_layers": 1},  # as Composer's log_hyperparameters
        {"BlurPool/Conv2d to BlurConv2d": 1, "BlurPool/MaxPool2d to BlurMaxPool2d": 1},
    ]


def test_the_trainer_applies_it_and_logs_the_report() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([BlurPool()], loggers=[logger])
    module = trainer.state.model.module
    assert isinstance(module.maxpool, BlurMaxPool2d) and isinstance(module.layer2[0].conv1, BlurConv2d)
    assert logger.hyperparameters["BlurPool/Conv2d to BlurConv2d"] == 6
    assert logger.hyperparameters["BlurPool/MaxPool2d to BlurMaxPool2d"] == 1
    assert logger.hyperparameters["blurpool/num_blurconv_layers"] == 6  # Composer's keys, beside the report
    assert logger.hyperparameters["blurpool/num_blurpool_layers"] == 1
    optimizer_params = {id(p) for group in trainer.state.optimizers[0].param_groups for p in group["params"]}
    assert optimizer_params == {id(p) for p in trainer.state.model.parameters()}


def test_a_checkpoint_after_surgery_needs_the_same_surgery(tmp_path: Path) -> None:
    trained = _trainer([BlurPool(blur_first=False)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([BlurPool(blur_first=False)], load_path=checkpoint)
    x = torch.rand(2, 3, 32, 32)
    trained.state.model.eval()
    resumed.state.model.eval()
    assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    with pytest.raises(RuntimeError, match=r"written after BlurPool\(.*blur_first=False") as refused:
        _trainer([], load_path=checkpoint)
    assert type(refused.value).__name__ == "CheckpointMismatchError"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_channels": -2}, "`min_channels`"),
        ({"replace_convs": 1}, "`replace_convs`"),
        ({"replace_convs": False, "replace_maxpools": False}, "`replace_maxpools`=False"),
        ({"strict": "no"}, "`strict`"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BlurPool(**kwargs)
