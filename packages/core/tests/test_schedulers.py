"""LR schedules as functions of training time; scale_schedule_ratio stretches them."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, InMemoryLogger, State, Timestamp, Trainer
from cadence.schedulers import (
    CosineAnnealingScheduler,
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
    _, lrs = logger.steps_and_values("lr-SGD/group0")
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
            schedulers=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step),  # no time constant
            scale_schedule_ratio=2.0,
            progress_bar=False,
        )


def _lr_curve(schedulers, ratio: float, duration: str = "8ep") -> tuple[list[float], int]:
    """The learning rate at every batch of a run scaled by `ratio`, and its number of batches."""
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    rates: list[float] = []

    class Rates(Callback):
        def batch_start(self, state, logger) -> None:
            rates.append(state.optimizers[0].param_groups[0]["lr"])

    trainer = Trainer(
        model=model,
        train_dataloader=torch.utils.data.DataLoader(data, batch_size=4),  # 4 batches per epoch
        max_duration=duration,
        optimizers=optimizer,
        schedulers=schedulers(optimizer),
        callbacks=[Rates()],
        scale_schedule_ratio=ratio,
        progress_bar=False,
    )
    trainer.fit()
    return rates, trainer.state.timestamp.batch


@pytest.mark.parametrize(
    ("schedulers", "every_batch"),
    [
        (lambda opt: CosineAnnealingWithWarmupScheduler(t_warmup="4ba"), True),
        (lambda opt: MultiStepWithWarmupScheduler(t_warmup="2ba", milestones=["4ep", "6ep"]), True),
        (lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[4, 6], gamma=0.1), False),
        (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), False),
    ],
    ids=["cosine-warmup", "multistep-warmup", "torch-multistep", "torch-step"],
)
def test_a_ratio_of_one_half_halves_the_steps_and_compresses_the_lr_curve_exactly(schedulers, every_batch) -> None:
    whole, whole_batches = _lr_curve(schedulers, 1.0)
    half, half_batches = _lr_curve(schedulers, 0.5)
    assert (whole_batches, half_batches) == (32, 16)
    if every_batch:  # cadence schedulers: batch i of the half run is batch 2i of the whole run
        assert half == pytest.approx(whole[::2], abs=1e-12)
    else:  # torch schedulers step per epoch (4 batches): epoch e of the half run is epoch 2e of the whole run
        assert half[::4] == pytest.approx(whole[::8], abs=1e-12) and len(set(half)) > 1


def test_epochs_are_truncated_as_composer_truncates_them() -> None:
    _, batches = _lr_curve(lambda opt: CosineAnnealingScheduler(), 0.5, duration="3ep")  # int(1.5) = 1 epoch
    assert batches == 4
