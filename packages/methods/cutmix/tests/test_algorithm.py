"""`CutMix` inside the real Trainer: events, keys, dict batches, segmentation, microbatches, validation."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cadence_cutmix import CutMix
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cadence import (
    Algorithm,
    Callback,
    Classifier,
    Event,
    MethodConflictError,
    MethodError,
    Trainer,
)
from cadence.engine import check_composition
from cadence.testing import DictImageClassifier, DictImageDataset, image_dataset, tiny_image_classifier

NUM_CLASSES = 4


class Probe(Algorithm):
    """The outermost method: sees each microbatch before CutMix changes it and after CutMix restores it."""

    events = (Event.BEFORE_FORWARD, Event.AFTER_LOSS)
    order = -100

    def __init__(self, input_key: Any = 0, target_key: Any = 1):
        self.input_key, self.target_key = input_key, target_key
        self.inputs: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.restored: list[torch.Tensor] = []

    def match(self, event: Event, state: Any) -> bool:
        return True

    def apply(self, event: Event, state: Any, logger: Any) -> None:
        if event is Event.BEFORE_FORWARD:
            self.inputs.append(state.batch_get_item(self.input_key))
            self.targets.append(state.batch_get_item(self.target_key))
        else:
            self.restored.append(state.batch_get_item(self.target_key))


class Spy(Callback):
    """Runs after every method: records what the model and the loss saw, and CutMix's draws."""

    def __init__(self, method: CutMix):
        self.method = method
        self.mixed: list[torch.Tensor] = []
        self.draws: list[tuple[torch.Tensor, tuple[int, int, int, int], float]] = []
        self.targets: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def before_forward(self, state: Any, logger: Any) -> None:
        assert self.method.indices is not None
        self.mixed.append(state.batch_get_item(self.method.input_key))
        self.draws.append((self.method.indices.clone(), self.method.bbox, self.method.area))

    def before_loss(self, state: Any, logger: Any) -> None:
        self.targets.append(state.batch_get_item(self.method.target_key))

    def after_loss(self, state: Any, logger: Any) -> None:
        self.losses.append(state.loss.detach())


def _train(
    method: CutMix,
    *,
    samples: int = 8,
    batch_size: int = 4,
    duration: str = "2ba",
    model: Any = None,
    dataset: Any = None,
    **kwargs: Any,
) -> tuple[Trainer, Probe, Spy]:
    torch.manual_seed(0)
    model = model if model is not None else tiny_image_classifier(NUM_CLASSES)
    dataset = dataset if dataset is not None else image_dataset(samples, NUM_CLASSES, (3, 8, 8))
    probe, spy = Probe(method.input_key, method.target_key), Spy(method)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=batch_size),
        max_duration=duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[probe, method],
        callbacks=[spy],
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )
    trainer.fit()
    return trainer, probe, spy


def _pasted(x: torch.Tensor, perm: torch.Tensor, bbox: tuple[int, int, int, int]) -> torch.Tensor:
    x1, y1, x2, y2 = bbox
    expected = x.clone()
    expected[..., x1:x2, y1:y2] = x[perm][..., x1:x2, y1:y2]
    return expected


@pytest.mark.parametrize("uniform_sampling", [False, True])
def test_box_is_pasted_targets_mixed_by_area_and_restored(uniform_sampling: bool) -> None:
    method = CutMix(uniform_sampling=uniform_sampling)
    _, probe, spy = _train(method, duration="4ba")
    assert len(spy.draws) == 4
    for x, y, mixed, (perm, bbox, area), target, restored in zip(
        probe.inputs, probe.targets, spy.mixed, spy.draws, spy.targets, probe.restored
    ):
        assert torch.equal(mixed, _pasted(x, perm, bbox))
        x1, y1, x2, y2 = bbox
        assert area == 1 - (x2 - x1) * (y2 - y1) / (8 * 8)
        expected = area * F.one_hot(y, NUM_CLASSES).float() + (1 - area) * F.one_hot(y[perm], NUM_CLASSES).float()
        torch.testing.assert_close(target, expected)
        torch.testing.assert_close(target.sum(dim=1), torch.ones(len(y)))
        assert restored is y  # AFTER_LOSS puts the very same target object back


def test_loss_interpolation_equals_target_interpolation_through_the_trainer() -> None:
    by_targets, _, spy_t = _train(CutMix(), duration="3ba")
    by_loss, probe, spy_l = _train(CutMix(interpolate_loss=True), duration="3ba")
    for (perm_t, box_t, _), (perm_l, box_l, _) in zip(spy_t.draws, spy_l.draws):
        assert torch.equal(perm_t, perm_l) and box_t == box_l
    for loss_t, loss_l in zip(spy_t.losses, spy_l.losses):
        assert abs(loss_t.item() - loss_l.item()) <= 1e-6
    for y, restored in zip(probe.targets, probe.restored):
        assert restored is y
    for a, b in zip(by_targets.state.model.parameters(), by_loss.state.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_each_microbatch_draws_its_own_box_and_mixes_within_itself() -> None:
    method = CutMix()
    _, probe, spy = _train(method, samples=8, batch_size=8, duration="1ba", device_train_microbatch_size=4)
    assert len(spy.draws) == 2
    for x, mixed, (perm, bbox, _) in zip(probe.inputs, spy.mixed, spy.draws):
        assert x.shape[0] == 4 and sorted(perm.tolist()) == [0, 1, 2, 3]
        assert torch.equal(mixed, _pasted(x, perm, bbox))
    _, _, whole = _train(CutMix(), samples=8, batch_size=8, duration="1ba")
    assert len(whole.draws) == 1 and torch.isfinite(whole.losses[0])


def _segmentation_data(n: int = 8) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.rand(n, 3, 8, 8, generator=generator), torch.randint(0, NUM_CLASSES, (n, 8, 8), generator=generator)
    )


def test_segmentation_targets_take_the_same_box() -> None:
    method = CutMix()
    model = Classifier(nn.Conv2d(3, NUM_CLASSES, 1), num_classes=NUM_CLASSES)
    _, probe, spy = _train(method, model=model, dataset=_segmentation_data())
    for y, (perm, bbox, _), target, restored in zip(probe.targets, spy.draws, spy.targets, probe.restored):
        assert torch.equal(target, _pasted(y, perm, bbox))
        assert restored is y


def test_segmentation_targets_refuse_loss_interpolation() -> None:
    model = Classifier(nn.Conv2d(3, NUM_CLASSES, 1), num_classes=NUM_CLASSES)
    with pytest.raises(MethodError, match="segmentation"):
        _train(CutMix(interpolate_loss=True), model=model, dataset=_segmentation_data())


@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_dict_batches_through_input_key_and_target_key(interpolate_loss: bool) -> None:
    method = CutMix(interpolate_loss=interpolate_loss, input_key="image", target_key="label")
    _, probe, spy = _train(method, model=DictImageClassifier(NUM_CLASSES), dataset=DictImageDataset(8, NUM_CLASSES))
    for x, mixed, (perm, bbox, _), target in zip(probe.inputs, spy.mixed, spy.draws, spy.targets):
        assert torch.equal(mixed, _pasted(x, perm, bbox))
        assert target.is_floating_point() != interpolate_loss


def test_effects() -> None:
    with pytest.raises(MethodConflictError, match="CutMix is listed twice"):  # it would paste twice per batch
        check_composition([CutMix(), CutMix()])
    assert not CutMix().effects().exclusive
    with pytest.raises(MethodConflictError, match=r"CutMix and CutMix .*loss"):
        check_composition([CutMix(interpolate_loss=True), CutMix(interpolate_loss=True)])


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"alpha": 0.0}, ValueError, "`alpha`"),
        ({"alpha": -1}, ValueError, "`alpha`"),
        ({"alpha": "1"}, ValueError, "`alpha`"),
        ({"interpolate_loss": 1}, TypeError, "`interpolate_loss`"),
        ({"uniform_sampling": "no"}, TypeError, "`uniform_sampling`"),
        ({"input_key": 0.0}, TypeError, "`input_key`"),
        ({"target_key": False}, TypeError, "`target_key`"),
        ({"target_key": [1]}, TypeError, "`target_key`"),
    ],
)
def test_bad_hyperparameters_are_rejected_at_construction(kwargs: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        CutMix(**kwargs)


def test_matches_only_its_mode_events() -> None:
    state: Any = None
    assert CutMix().match(Event.BEFORE_LOSS, state)
    assert not CutMix(interpolate_loss=True).match(Event.BEFORE_LOSS, state)
    assert not CutMix().match(Event.AFTER_DATALOADER, state)
    assert "0x" not in repr(CutMix())


def test_composer_attributes_describe_the_last_step_and_stay_out_of_checkpoints() -> None:
    """Composer's CutMix keeps ``_indices``, ``_permuted_target``, ``_adjusted_lambda`` and ``_bbox``."""
    from cadence import Logger, State

    method = CutMix(seed=2)
    assert method.indices.numel() == 0 and method._indices.numel() == 0 and method.permuted_target.numel() == 0
    x, y = torch.rand(6, 3, 8, 8), torch.arange(6)
    state = State(model=tiny_image_classifier())
    state.batch = (x, y)
    method.apply(Event.INIT, state, Logger(state))
    method.apply(Event.BEFORE_FORWARD, state, Logger(state))
    x1, y1, x2, y2 = method._bbox
    assert method._bbox == method.bbox and method._indices is method.indices
    assert method._adjusted_lambda == method.area == pytest.approx(1 - (x2 - x1) * (y2 - y1) / 64)
    expected = x.clone()
    expected[..., x1:x2, y1:y2] = x[method.indices][..., x1:x2, y1:y2]  # Composer: x along H, y along W
    assert torch.equal(state.batch[0], expected)
    assert torch.equal(method._permuted_target, y[method.indices])
    assert set(method.state_dict()) == {"rng"}  # the next step draws anew from the generators
