"""GhostBatchNorm adapter: INIT only, batches too small to split refused, checkpoints that need the same surgery."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_ghost_batchnorm import GhostBatchNorm, GhostBatchNorm2d

from cadence import Classifier, Event, InMemoryLogger, NotApplicableError, Resource, Trainer
from cadence.testing import image_dataset, sgd_trainer


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = Classifier(torchvision.models.resnet18(num_classes=4), num_classes=4)
    return sgd_trainer(model, image_dataset(8, 4), algorithms, lr=0.01, seed=1, shuffle=False, **kwargs)


def test_declarations() -> None:
    algorithm = GhostBatchNorm()
    assert algorithm.events == (Event.INIT,) and algorithm.required_on_load()
    assert algorithm.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}
    assert repr(algorithm) == "GhostBatchNorm(ghost_batch_size=32, strict=False)"


def test_batches_no_larger_than_a_ghost_batch_are_refused_before_training() -> None:
    images, labels = torch.rand(16, 3, 8, 8), torch.zeros(16, dtype=torch.long)
    with pytest.raises(NotApplicableError, match=r"batches of 16 samples are one ghost batch.*below 16 \(e\.g\. 4\)"):
        GhostBatchNorm().check_applicable(None, (images, labels))
    with pytest.raises(NotApplicableError, match=r"batches of 1 samples.*use larger batches"):
        GhostBatchNorm(ghost_batch_size=1).check_applicable(None, [images[:1], labels[:1]])
    GhostBatchNorm(ghost_batch_size=8).check_applicable(None, (images, labels))
    GhostBatchNorm(ghost_batch_size=8).check_applicable(None, {"image": images, "label": labels})


def test_the_trainer_applies_it_and_logs_the_report() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([GhostBatchNorm(ghost_batch_size=2)], loggers=[logger])
    assert isinstance(trainer.state.model.module.bn1, GhostBatchNorm2d)
    assert logger.hyperparameters == {
        "GhostBatchNorm/BatchNorm2d to GhostBatchNorm2d": 20,  # the report
        "GhostBatchNorm/num_new_modules": 20,  # Composer's key
    }
    trainer.fit()
    assert trainer.state.model.module.bn1.num_batches_tracked == 4  # 2 steps of 2 ghost batches


def test_a_checkpoint_after_surgery_needs_the_same_surgery(tmp_path: Path) -> None:
    trained = _trainer([GhostBatchNorm(ghost_batch_size=2)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([GhostBatchNorm(ghost_batch_size=2)], load_path=checkpoint)
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(trained.state.model.eval().module(x), resumed.state.model.eval().module(x))
    with pytest.raises(RuntimeError, match=r"written after GhostBatchNorm\(ghost_batch_size=2") as refused:
        _trainer([], load_path=checkpoint)
    assert type(refused.value).__name__ == "CheckpointMismatchError"


@pytest.mark.parametrize("value", [0, -1, 1.5, "32", None])
def test_bad_ghost_sizes_raise_at_construction(value: object) -> None:
    with pytest.raises(ValueError, match="`ghost_batch_size`"):
        GhostBatchNorm(ghost_batch_size=value)  # type: ignore[arg-type]
