"""SWA adapter: the window, the average and BatchNorm statistics in a run, the SWA learning rate next to the
trainer's schedulers, exact resume before, inside and after the window, arguments, the conflict with EMA."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from cadence_swa import SWA
from torch.optim.swa_utils import update_bn
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Classifier, Event, MethodConflictError, Resource, State, Trainer
from cadence import schedulers as cadence_schedulers
from cadence.engine import check_composition
from cadence.testing import assert_same_tensors, image_dataset, tiny_image_classifier


class WeightsAtBatchEnd(Algorithm):
    """Records the training weights on BATCH_END before SWA (order 200) may replace them."""

    events = (Event.BATCH_END,)
    order = 0

    def __init__(self) -> None:
        self.seen: dict[int, dict[str, torch.Tensor]] = {}

    def match(self, event: Event, state: State) -> bool:
        return True

    def apply(self, event: Event, state: State, logger: Any) -> None:
        self.seen[state.timestamp.batch] = {k: v.detach().clone() for k, v in state.model.named_parameters()}


class Rates(Callback):
    """The learning rate each optimizer step used (a post-hook registered before SWA's restores it)."""

    def __init__(self) -> None:
        self.used: list[float] = []

    def fit_start(self, state: State, logger: Any) -> None:
        pass  # registered in _trainer, before SWA's hooks

    def record(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        self.used.append(optimizer.param_groups[0]["lr"])


def _resnet() -> Classifier:
    return Classifier(torchvision.models.resnet18(num_classes=4), num_classes=4)


def _trainer(swa: SWA, duration: str = "8ba", *, model=None, shuffle: bool = True, rates: Rates | None = None,
             extra: tuple = (), **kwargs: Any) -> Trainer:  # fmt: skip
    torch.manual_seed(0)
    model = model() if model else tiny_image_classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if rates is not None:
        optimizer.register_step_post_hook(rates.record)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4, shuffle=shuffle),  # 4 batches per epoch
        max_duration=duration,
        optimizers=optimizer,
        algorithms=[*extra, swa],
        seed=5,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _bn_reference(model: torch.nn.Module, batch_size: int) -> dict[str, torch.Tensor]:
    """torch's update_bn on a copy, over the training images in their order (the loaders do not shuffle)."""
    copied = copy.deepcopy(model.module)
    update_bn([x for x, _ in DataLoader(image_dataset(16), batch_size=batch_size)], copied)
    return dict(copied.named_buffers())


@pytest.mark.parametrize(
    ("model", "microbatch", "window", "sampled"),
    [(_resnet, None, ("1ba", "3ba", "1ba"), [1, 2, 3]), (None, 2, ("2ba", "6ba", "2ba"), [2, 4, 6])],
    ids=["resnet18", "tiny-cnn-microbatches"],
)
def test_the_model_becomes_the_mean_of_the_sampled_weights_with_bn_recomputed(
    model: Any, microbatch: Any, window: tuple, sampled: list
) -> None:
    recorder, swa = WeightsAtBatchEnd(), SWA(*window)
    trainer = _trainer(swa, f"{sampled[-1]}ba", model=model, shuffle=False, extra=(recorder,),
                       device_train_microbatch_size=microbatch)  # fmt: skip
    trainer.fit()
    assert (swa.num_averaged, swa.step_counter, swa.swa_completed) == (3, sampled[-1] - sampled[0] + 1, True)
    for name, value in trainer.state.model.named_parameters():
        mean = torch.stack([recorder.seen[b][name].double() for b in sampled]).mean(0)
        torch.testing.assert_close(value.double(), mean, rtol=1e-6, atol=1e-6)
    expected = _bn_reference(trainer.state.model, microbatch or 4)
    buffers = {k.removeprefix("module."): v for k, v in trainer.state.model.named_buffers()}
    assert_same_tensors(buffers, expected, "BatchNorm statistics")


def test_swa_end_in_the_last_epoch_recomputes_bn_before_the_final_eval_and_checkpoint(tmp_path: Path) -> None:
    """Composer #624: an epoch interval with swa_end inside the last epoch left the BatchNorm statistics stale."""

    class BuffersAtEval(Callback):
        def eval_start(self, state: State, logger: Any) -> None:
            self.buffers = {k.removeprefix("module."): v.clone() for k, v in state.model.named_buffers()}

    seen, swa = BuffersAtEval(), SWA(swa_start="0.4dur", swa_end="0.97dur")  # update_interval '1ep'
    trainer = _trainer(swa, "2ep", shuffle=False, callbacks=[seen], save_folder=tmp_path, save_interval="1ep",
                       eval_dataloader=DataLoader(image_dataset(4, seed=2), batch_size=4))  # fmt: skip
    trainer.fit()
    assert swa.swa_completed and swa.num_averaged == 2  # epoch ends 1 and 2
    expected = _bn_reference(trainer.state.model, 4)
    assert_same_tensors(seen.buffers, expected, "statistics the final evaluation used")
    saved = torch.load(tmp_path / "ep2-ba8.pt", weights_only=True)
    assert_same_tensors(saved["model"], trainer.state.model.state_dict(), "the final checkpoint")


def test_a_run_ending_mid_epoch_still_replaces_the_weights_at_its_last_batch() -> None:
    recorder, swa = WeightsAtBatchEnd(), SWA(swa_start="0.5dur", swa_end="0.9dur")  # epoch ends only at batch 4
    trainer = _trainer(swa, "6ba", extra=(recorder,))
    trainer.fit()
    assert swa.swa_completed and swa.num_averaged == 1
    assert_same_tensors(dict(trainer.state.model.named_parameters()), recorder.seen[4], "the average of one sample")


def test_training_goes_on_from_the_average_after_swa_end() -> None:
    recorder, swa = WeightsAtBatchEnd(), SWA(swa_start="1ba", swa_end="2ba", update_interval="1ba")
    trainer = _trainer(swa, "4ba", extra=(recorder,))
    trainer.fit()
    average = {k: (recorder.seen[1][k] + (recorder.seen[2][k] - recorder.seen[1][k]) / 2) for k in recorder.seen[1]}
    assert not swa.match(Event.BATCH_END, trainer.state) and swa.state_dict()["averaged"] == {}  # memory released
    assert not torch.allclose(recorder.seen[4]["module.head.weight"], average["module.head.weight"])


def test_a_window_that_never_opens_warns_and_leaves_the_model() -> None:
    with pytest.warns(UserWarning, match="SWA never averaged: the run ended before swa_start='9ep'"):
        _trainer(SWA(swa_start="9ep", swa_end="10ep"), "4ba").fit()


def test_the_swa_rate_is_used_inside_the_window_and_the_schedule_is_untouched_outside() -> None:
    swa = SWA(swa_start="3ba", swa_end="6ba", update_interval="1ba", schedule_swa_lr=True, anneal_steps=2, swa_lr=0.01)
    plain, with_swa = Rates(), Rates()
    _trainer(SWA(swa_start="3ba", swa_end="6ba", update_interval="1ba"), rates=plain,
             schedulers=cadence_schedulers.CosineAnnealingScheduler()).fit()  # fmt: skip
    _trainer(swa, rates=with_swa, schedulers=cadence_schedulers.CosineAnnealingScheduler()).fit()
    lr0 = plain.used[3]  # the rate of step 4, set by the scheduler after step 3, when the window opened
    inside = [0.01 * a + lr0 * (1 - a) for a in (0.5, 1.0, 1.0)]  # after 1, 2, 3 updates; steps 4, 5, 6
    assert with_swa.used[:3] == plain.used[:3] and with_swa.used[6:] == plain.used[6:]
    assert with_swa.used[3:6] == pytest.approx(inside, rel=1e-12)


def test_a_chainable_torch_scheduler_never_sees_the_swa_rate() -> None:
    def step_lr(trainer_optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.StepLR:
        return torch.optim.lr_scheduler.StepLR(trainer_optimizer, step_size=1, gamma=0.5)  # every epoch

    plain, with_swa = Rates(), Rates()
    for rates, schedule in ((plain, False), (with_swa, True)):
        swa = SWA(swa_start="2ba", swa_end="3ba", update_interval="1ba", schedule_swa_lr=schedule,
                  swa_lr=0.3 if schedule else None)  # fmt: skip
        trainer = _trainer(swa, "3ep", rates=rates)
        trainer.fit(schedulers=step_lr(trainer.state.optimizers[0]))
    assert with_swa.used[2] == 0.1 + (0.3 - 0.1) * 0.1  # one update of ten
    assert (
        with_swa.used[:2] == plain.used[:2] and with_swa.used[3:] == plain.used[3:] == [0.1] + [0.05] * 4 + [0.025] * 4
    )


@pytest.mark.parametrize("interval", ["1ba", "1ep"])
def test_resume_before_inside_and_after_the_window_is_exact(tmp_path: Path, interval: str) -> None:
    def make() -> SWA:
        return SWA(swa_start="0.25dur", swa_end="0.75dur", update_interval=interval, schedule_swa_lr=True, swa_lr=0.02)

    whole = _trainer(make(), "8ba", save_folder=tmp_path, save_interval="1ba")
    whole.fit()
    saved = torch.load(tmp_path / "ep1-ba5.pt", weights_only=True)["algorithms"][0][1]
    assert saved["swa_started"] and saved["num_averaged"] == (4 if interval == "1ba" else 1)
    assert len(saved["averaged"]) == len(list(whole.state.model.parameters()))  # the average is checkpointed
    for batch in (1, 3, 5, 7):  # before, inside, inside with the replacement in the resumed epoch, after
        epoch = batch // 4
        resumed = _trainer(make(), "8ba", load_path=tmp_path / f"ep{epoch}-ba{batch}.pt")
        resumed.fit()
        assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), f"model (ba{batch})")
        assert_same_tensors(whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "opt")
        assert_same_tensors(whole.state.algorithms[0].state_dict(), resumed.state.algorithms[0].state_dict(), "SWA")


class EMA(Algorithm):
    """Stands in for cadence_ema.EMA (method packages never import each other)."""

    def match(self, event: Event, state: State) -> bool:
        return False

    def apply(self, event: Event, state: State, logger: Any) -> None:
        pass


def test_the_engine_refuses_swa_with_ema_giving_the_fix() -> None:
    with pytest.raises(MethodConflictError, match=r"SWA and EMA cannot be used together\. Fix: use one of them"):
        check_composition([SWA(), EMA()])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"swa_start": "0.9dur", "swa_end": "0.5dur"}, ValueError, "`swa_end`='0.5dur' must come after `swa_start`"),
        ({"swa_start": "5ep", "swa_end": "5ep"}, ValueError, "must come after"),
        ({"swa_start": "5ep", "swa_end": "0.9dur"}, ValueError, "must use the same unit"),
        ({"swa_end": "1.5dur"}, ValueError, r"`swa_end`='1.5dur' must be an amount of dur \(at most 1\), ep, ba"),
        ({"swa_start": "1.5ep", "swa_end": "3ep"}, ValueError, "`swa_start`='1.5ep' is not a time"),
        ({"swa_start": 7}, TypeError, "`swa_start`=7 is not a time"),
        ({"update_interval": "0ep"}, ValueError, "`update_interval`='0ep' must be a positive amount of ba, ep"),
        ({"update_interval": "0.1dur"}, ValueError, "`update_interval`"),
        ({"anneal_steps": -1}, ValueError, "`anneal_steps`"),
        ({"swa_lr": 0.1}, ValueError, "`schedule_swa_lr`=True"),
    ],
)
def test_bad_arguments_are_refused_at_construction_naming_them(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        SWA(**kwargs)


def test_repr_effects_and_fractions() -> None:
    assert repr(SWA()) == (
        "SWA(swa_start='0.7dur', swa_end='0.97dur', update_interval='1ep', schedule_swa_lr=False, "
        "anneal_strategy='linear', anneal_steps=10, swa_lr=None)"
    )
    assert SWA(swa_start=0.5, swa_end=1.0)._end.value == 1.0  # floats are fractions of the run
    assert SWA().effects().writes == {Resource.WEIGHTS} and "EMA" in SWA().effects().conflicts
    assert Resource.SCHEDULE in SWA(schedule_swa_lr=True).effects().writes
