"""ScaleSchedule on INIT: half the steps with the whole LR curve, composed with the trainer's ratio, resumed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cadence_scale_schedule import ScaleSchedule
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Callback, Event, Resource, State, Time, Trainer
from cadence import schedulers as cadence_schedulers
from cadence.testing import assert_same_tensors, mlp_classifier

SCHEDULERS: dict[str, tuple[Callable[[Any], Any], bool]] = {  # name: (factory, stepped every batch)
    "cosine-warmup": (lambda opt: cadence_schedulers.CosineAnnealingWithWarmupScheduler(t_warmup="4ba"), True),
    "multistep-warmup": (
        lambda opt: cadence_schedulers.MultiStepWithWarmupScheduler(t_warmup="2ba", milestones=["4ep", "6ep"]),
        True,
    ),
    "torch-multistep": (lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[4, 6], gamma=0.1), False),
    "torch-step": (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), False),
}


class _Rates(Callback):
    def __init__(self) -> None:
        self.rates: list[float] = []

    def batch_start(self, state: State, logger: Any) -> None:
        self.rates.append(state.optimizers[0].param_groups[0]["lr"])


def _trainer(algorithms: list[Algorithm], schedulers: Callable[[Any], Any], **kwargs: Any) -> tuple[Trainer, _Rates]:
    torch.manual_seed(0)
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TensorDataset(torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 2)
    rates = _Rates()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),  # 4 batches per epoch
        max_duration=kwargs.pop("max_duration", "8ep"),
        optimizers=optimizer,
        schedulers=schedulers(optimizer),
        algorithms=algorithms,
        callbacks=[rates],
        seed=2,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )
    return trainer, rates


def test_declarations() -> None:
    algorithm = ScaleSchedule(0.5)
    state = State(model=mlp_classifier(4, 2), max_duration="8ep", dataloader_len=4)
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT]
    assert algorithm.effects().writes == {Resource.SCHEDULE, Resource.DURATION}  # it rescales the run's length
    assert repr(algorithm) == "ScaleSchedule(ratio=0.5)" and ScaleSchedule().ratio == 1.0
    algorithm.apply(Event.INIT, state, None)
    assert (state.max_duration, state.scale_schedule_ratio) == (Time.from_timestring("4ep"), 0.5)


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_half_the_steps_with_the_whole_lr_curve_compressed_exactly(name: str) -> None:
    schedulers, every_batch = SCHEDULERS[name]
    whole, whole_rates = _trainer([], schedulers)
    half, half_rates = _trainer([ScaleSchedule(0.5)], schedulers)
    whole.fit()
    half.fit()
    assert (whole.state.timestamp.batch, half.state.timestamp.batch) == (32, 16)
    if every_batch:  # batch i of the half run is batch 2i of the whole run
        assert half_rates.rates == pytest.approx(whole_rates.rates[::2], abs=1e-12)
    else:  # torch schedulers step per epoch (4 batches): epoch e of the half run is epoch 2e of the whole run
        assert half_rates.rates[::4] == pytest.approx(whole_rates.rates[::8], abs=1e-12)
        assert len(set(half_rates.rates)) > 1


@pytest.mark.parametrize("name", ["cosine-warmup", "torch-multistep"])
def test_ratios_multiply_with_the_trainers(name: str) -> None:
    schedulers, _ = SCHEDULERS[name]
    both, both_rates = _trainer([ScaleSchedule(0.5)], schedulers, scale_schedule_ratio=0.5)
    product, product_rates = _trainer([], schedulers, scale_schedule_ratio=0.25)
    both.fit()
    product.fit()
    assert both.state.scale_schedule_ratio == 0.25 and both.state.timestamp.batch == 8
    assert both_rates.rates == product_rates.rates
    assert_same_tensors(both.state.model.state_dict(), product.state.model.state_dict(), "model")


def test_methods_on_init_see_the_scaled_run() -> None:
    seen: list[Any] = []

    class ReadsDuration(Algorithm):
        events = (Event.INIT,)

        def match(self, event: Event, state: State) -> bool:
            return event is Event.INIT

        def apply(self, event: Event, state: State, logger: Any) -> None:
            seen.append((state.max_duration, state.scale_schedule_ratio))

    _trainer([ReadsDuration(), ScaleSchedule(0.5)], lambda opt: [])  # listed after it, ordered before it
    assert seen == [(Time.from_timestring("4ep"), 0.5)]


def test_epochs_are_truncated_as_composer_truncates_them() -> None:
    trainer, _ = _trainer([ScaleSchedule(0.5)], SCHEDULERS["cosine-warmup"][0], max_duration="3ep")
    trainer.fit()
    assert trainer.state.max_duration == Time.from_timestring("1ep") and trainer.state.timestamp.batch == 4


@pytest.mark.parametrize("name", ["cosine-warmup", "torch-multistep"])
def test_a_halved_run_resumes_exactly(tmp_path: Path, name: str) -> None:
    schedulers, _ = SCHEDULERS[name]
    whole, _ = _trainer([ScaleSchedule(0.5)], schedulers, save_folder=tmp_path / "a", save_interval="3ba")
    whole.fit()  # 16 batches (4 epochs of 4): checkpoints every 3 batches, ba6 is mid-epoch
    resumed, _ = _trainer([ScaleSchedule(0.5)], schedulers, load_path=tmp_path / "a" / "ep1-ba6.pt")
    assert resumed.state.timestamp.batch == 6 and resumed.state.max_duration == Time.from_timestring("4ep")
    resumed.fit()
    assert resumed.state.timestamp.batch == 16
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    assert_same_tensors(whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "optimizer")
    for ours, theirs in zip(whole.state.schedulers, resumed.state.schedulers):
        assert ours.get_last_lr() == theirs.get_last_lr()


def test_bad_ratio_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="`ratio`=0 must be a finite number > 0"):
        ScaleSchedule(ratio=0)
