"""LR schedules as functions of training time; scale_schedule_ratio stretches them."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import InMemoryLogger, State, Timestamp, Trainer
from cadence.schedulers import (
    CosineAnnealingWithWarmupScheduler,
    LinearWithWarmupScheduler,
    MultiStepWithWarmupScheduler,
    StepScheduler,
)
from cadence.testing import mlp_classifier


def _state_at(batch: int, max_duration: str = "100ba", dataloader_len: int = 10) -> State:
    state = State(model=mlp_classifier(2, 2), max_duration=max_duration, dataloader_len=dataloader_len)
    state.timestamp = Timestamp(batch=batch)
    return state


def test_cosine_with_warmup_values() -> None:
    schedule = CosineAnnealingWithWarmupScheduler(t_warmup="10ba", alpha_f=0.1)
    assert schedule(_state_at(0)) == 0.0
    assert schedule(_state_at(5)) == pytest.approx(0.5)
    assert schedule(_state_at(10)) == pytest.approx(1.0)
    assert schedule(_state_at(55)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert schedule(_state_at(100)) == pytest.approx(0.1)


def test_units_convert_through_the_loader_length() -> None:
    linear = LinearWithWarmupScheduler(t_warmup="1ep", alpha_f=0.0)  # 1 epoch = 10 batches
    assert linear(_state_at(5)) == pytest.approx(0.5)
    assert linear(_state_at(55)) == pytest.approx(0.5)
    steps = MultiStepWithWarmupScheduler(t_warmup="0ba", milestones=["0.5dur", "8ep"], gamma=0.1)
    assert [steps(_state_at(b)) for b in (49, 50, 79, 80)] == pytest.approx([1.0, 0.1, 0.1, 0.01])
    assert StepScheduler("3ep", gamma=0.5)(_state_at(61)) == pytest.approx(0.25)


def test_scale_schedule_ratio_stretches_batch_times_and_durations() -> None:
    schedule = CosineAnnealingWithWarmupScheduler(t_warmup="10ba")
    # with ssr 2 the run is 200 batches and warm-up 20: batch 10 is halfway through warm-up
    assert schedule(_state_at(10, "200ba"), ssr=2.0) == pytest.approx(0.5)
    assert schedule(_state_at(110, "200ba"), ssr=2.0) == pytest.approx(0.5)  # middle of the cosine


def test_trainer_applies_the_schedule_every_batch_and_scales_the_run() -> None:
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    model = mlp_classifier(4, 2)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=10),
        max_duration="4ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=1.0),
        schedulers=LinearWithWarmupScheduler(t_warmup="2ba", alpha_f=0.0),
        scale_schedule_ratio=0.5,
        loggers=[logger],
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    assert trainer.state.timestamp.batch == 8  # 4 epochs * 0.5 = 2 epochs of 4 batches
    _, lrs = logger.get_timeseries("lr-SGD/group0")
    # the lr logged after batch t is the one batch t+1 uses; warm-up is 1 batch after scaling
    assert lrs == pytest.approx([1.0, 1 - 1 / 7, 1 - 2 / 7, 1 - 3 / 7, 1 - 4 / 7, 1 - 5 / 7, 1 - 6 / 7, 0.0])


def test_bad_schedule_arguments() -> None:
    with pytest.raises(ValueError, match=r"t_warmup='1\.5ep'"):
        CosineAnnealingWithWarmupScheduler(t_warmup="1.5ep")
    with pytest.raises(ValueError, match="alpha_f=2"):
        CosineAnnealingWithWarmupScheduler(t_warmup="1ba", alpha_f=2)
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="cannot rescale torch LRSchedulers"):
        Trainer(
            model=model,
            optimizers=optimizer,
            schedulers=torch.optim.lr_scheduler.StepLR(optimizer, 1),
            scale_schedule_ratio=2.0,
            progress_bar=False,
        )
