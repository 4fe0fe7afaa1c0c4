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
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT, Event.BATCH_START, Event.BEFORE_FORWARD]
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


# Steps are optimizer steps: microbatches and SAM's second pass use the step's masks ----------------------------------
def _sam() -> cadence.Algorithm:
    algorithms = pytest.importorskip("cadence.algorithms")
    if not hasattr(algorithms, "SAM"):
        pytest.skip("cadence-sam is not installed")
    return algorithms.SAM(rho=0.05)


@pytest.mark.parametrize("sam", [False, True], ids=["plain", "sam"])
@pytest.mark.parametrize("microbatch_size", [None, 2, 1], ids=["1-microbatch", "2-microbatches", "4-microbatches"])
def test_the_step_count_is_the_number_of_optimizer_steps(microbatch_size: int | None, sam: bool) -> None:
    """Composer counts forwards: 4 microbatches made it 4 per step, SAM 2 (the audit saw 8 after 4 SAM steps)."""
    algorithms = [GyroDropout(sigma=4, tau=2), *([_sam()] if sam else [])]
    trainer = _trainer(algorithms, max_duration="4ba", device_train_microbatch_size=microbatch_size)
    trainer.fit()
    assert trainer.state.timestamp.batch == 4 and _gyro(trainer).training_step == 4


def _masks_per_step(microbatch_size: int | None, sam: bool) -> dict[int, list[torch.Tensor]]:
    """The (rows, units) mask of every training forward of a 6-step run, by step (period 2: new picks at 1, 3, 5)."""
    algorithms = [GyroDropout(sigma=4, tau=2, seed=5), *([_sam()] if sam else [])]
    trainer = _trainer(algorithms, device_train_microbatch_size=microbatch_size)
    masks: dict[int, list[torch.Tensor]] = {}
    layer = _gyro(trainer)
    layer.register_forward_hook(
        lambda module, args, out: masks.setdefault(trainer.state.timestamp.batch, []).append(layer.dropout_mask.clone())
    )
    trainer.fit()
    assert layer.period == 2 and sorted(masks) == list(range(6))
    return masks


@pytest.mark.parametrize("sam", [False, True], ids=["plain", "sam"])
@pytest.mark.parametrize("microbatch_size", [2, 1], ids=["2-microbatches", "4-microbatches"])
def test_every_microbatch_of_a_step_uses_the_steps_masks_as_the_unsplit_batch(microbatch_size: int, sam: bool) -> None:
    """Each microbatch's rows get the masks they get in the unsplit batch of 4 (tau=2: rows 0-1 pick 0, 2-3 pick 1),
    in both of SAM's passes; the picks change every 2 optimizer steps, not every 2 forwards."""
    whole = _masks_per_step(None, sam=False)
    split = _masks_per_step(microbatch_size, sam)
    passes = 2 if sam else 1
    for step, forwards in split.items():
        assert len(forwards) == passes * 4 // microbatch_size and len(whole[step]) == 1
        for start in range(0, len(forwards), len(forwards) // passes):
            one_pass = torch.cat(forwards[start : start + len(forwards) // passes])
            assert torch.equal(one_pass, whole[step][0]), f"step {step}"
    assert not all(torch.equal(whole[0][0], whole[s][0]) for s in range(6))  # the picks do change


def test_a_resumed_run_with_microbatches_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    """The step count (extra state), the pool and picks (buffers) and the generator are in the checkpoint: resumed
    after 3 of 6 steps of 4 microbatches, the run ends bitwise where the uninterrupted one does."""
    uninterrupted = _trainer(
        [GyroDropout(sigma=4, tau=2, seed=3)], device_train_microbatch_size=1, save_folder=tmp_path, save_interval="3ba"
    )
    uninterrupted.fit()
    resumed = _trainer(
        [GyroDropout(sigma=4, tau=2, seed=3)], device_train_microbatch_size=1, load_path=tmp_path / "ep0-ba3.pt"
    )
    assert _gyro(resumed).training_step == 3  # steps, not the 12 forwards they took
    resumed.fit()
    assert _gyro(resumed).training_step == 6
    assert_same_tensors(resumed.state.model.state_dict(), uninterrupted.state.model.state_dict(), "model")
