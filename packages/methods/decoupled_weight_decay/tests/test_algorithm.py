"""DecoupledWeightDecay in the trainer: any optimizer decays exactly as DecoupledSGDW/DecoupledAdamW do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from cadence_decoupled_weight_decay import (
    DecoupledAdamW,
    DecoupledSGDW,
    DecoupledWeightDecay,
    apply_decoupled_weight_decay,
)
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Event, Resource, State, Trainer
from cadence import schedulers as cadence_schedulers
from cadence.testing import assert_same_tensors, image_dataset, tiny_image_classifier

SCHEDULES: dict[str, Callable[[Any], Any]] = {
    "cosine-warmup": lambda opt: cadence_schedulers.CosineAnnealingWithWarmupScheduler(t_warmup="2ba"),
    "torch-multistep": lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[1], gamma=0.1),
}


def _trainer(make_optimizer: Callable, algorithms: list[Algorithm], schedule: str, **kwargs: Any) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()
    optimizer = make_optimizer(model.parameters())
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4, shuffle=True),
        max_duration=kwargs.pop("max_duration", "3ep"),
        optimizers=optimizer,
        schedulers=SCHEDULES[schedule](optimizer),
        algorithms=algorithms,
        seed=4,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def test_declarations() -> None:
    algorithm = DecoupledWeightDecay()
    assert algorithm.weight_decay == 5e-4 and repr(algorithm) == "DecoupledWeightDecay(weight_decay=0.0005)"
    state = State(model=tiny_image_classifier())
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT, Event.AFTER_TRAIN_BATCH]
    assert algorithm.effects().writes == {Resource.WEIGHTS}
    with pytest.raises(ValueError, match=r"`weight_decay`=1\.5"):
        DecoupledWeightDecay(1.5)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_sgd_with_the_method_is_decoupled_sgdw_bitwise(schedule: str) -> None:
    method = _trainer(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), [DecoupledWeightDecay(5e-2)], schedule)
    optimizer = _trainer(lambda ps: DecoupledSGDW(ps, lr=0.1, momentum=0.9, weight_decay=5e-2), [], schedule)
    untouched = _trainer(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), [], schedule)
    for trainer in (method, optimizer, untouched):
        trainer.fit()
    assert_same_tensors(method.state.model.state_dict(), optimizer.state.model.state_dict(), "model")
    assert not torch.equal(method.state.model.module.head.weight, untouched.state.model.module.head.weight)


def test_adam_with_the_method_is_decoupled_adamw_bitwise() -> None:
    method = _trainer(
        lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.9, 0.95)), [DecoupledWeightDecay(1e-2)], "cosine-warmup"
    )
    optimizer = _trainer(lambda ps: DecoupledAdamW(ps, lr=1e-2, weight_decay=1e-2), [], "cosine-warmup")
    method.fit()
    optimizer.fit()
    assert_same_tensors(method.state.model.state_dict(), optimizer.state.model.state_dict(), "model")


class _OverflowAfterTheFirstStep(Callback):
    """Sets a loss scale at which the fp16 backward overflows; the scaler then skips steps while it backs off."""

    def batch_end(self, state: State, logger: Any) -> None:
        if state.timestamp.batch == 1:
            state.scaler.update(new_scale=2.0**24)


def test_fp16_steps_the_grad_scaler_skips_get_no_decay_either() -> None:
    runs = []
    for make, algorithms in [
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), [DecoupledWeightDecay(5e-2)]),
        (lambda ps: DecoupledSGDW(ps, lr=0.1, momentum=0.9, weight_decay=5e-2), []),
    ]:
        trainer = _trainer(
            make,
            algorithms,
            "cosine-warmup",
            precision="amp_fp16",
            max_duration="8ba",
            callbacks=[_OverflowAfterTheFirstStep()],
        )
        trainer.fit()
        assert trainer.state.scaler.get_scale() < 2.0**23, "no step overflowed: the test needs skipped steps"
        runs.append(trainer.state.model.state_dict())
    assert_same_tensors(runs[0], runs[1], "model")
    ungated = _trainer(
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        [_DecayEvenOnSkippedSteps(5e-2)],
        "cosine-warmup",
        precision="amp_fp16",
        max_duration="8ba",
        callbacks=[_OverflowAfterTheFirstStep()],
    )
    ungated.fit()
    assert not torch.equal(ungated.state.model.module.head.weight, trainer.state.model.module.head.weight)


class _DecayEvenOnSkippedSteps(DecoupledWeightDecay):
    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.AFTER_TRAIN_BATCH:
            apply_decoupled_weight_decay(state.optimizers[0].param_groups, self.weight_decay)


def test_an_optimizer_that_decays_already_is_refused() -> None:
    with pytest.raises(Exception, match=r"already decays its weights \(weight_decay=0.0005\).*weight_decay=0"):
        _trainer(lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=5e-4), [DecoupledWeightDecay()], "cosine-warmup")
