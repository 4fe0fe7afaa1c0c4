"""`LabelSmoothing` inside the real Trainer: events, restore, keys, dict batches, validation."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cadence_label_smoothing import LabelSmoothing
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Event, Trainer
from cadence.testing import DictImageClassifier, DictImageDataset, image_dataset, tiny_image_classifier

NUM_CLASSES = 4


class Probe(Algorithm):
    """The outermost method: sees the targets before smoothing and after they are restored."""

    events = (Event.BEFORE_LOSS, Event.AFTER_LOSS)
    order = -100

    def __init__(self, target_key: Any = 1):
        self.target_key = target_key
        self.targets: list[Any] = []
        self.copies: list[torch.Tensor] = []
        self.restored: list[Any] = []

    def match(self, event: Event, state: Any) -> bool:
        return True

    def apply(self, event: Event, state: Any, logger: Any) -> None:
        target = state.batch_get_item(self.target_key)
        if event is Event.BEFORE_LOSS:
            self.targets.append(target)
            self.copies.append(target.clone())
        else:
            self.restored.append(target)


class Spy(Callback):
    def __init__(self, target_key: Any = 1):
        self.target_key = target_key
        self.smoothed: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def before_loss(self, state: Any, logger: Any) -> None:
        self.smoothed.append(state.batch_get_item(self.target_key))
        self.outputs.append(state.outputs.detach())

    def after_loss(self, state: Any, logger: Any) -> None:
        self.losses.append(state.loss.detach())


def _train(
    method: LabelSmoothing, *, model: Any = None, dataset: Any = None, batch_size: int = 4, **kwargs: Any
) -> tuple[Probe, Spy]:
    torch.manual_seed(0)
    model = model if model is not None else tiny_image_classifier(NUM_CLASSES)
    dataset = dataset if dataset is not None else image_dataset(8, NUM_CLASSES, (3, 8, 8))
    probe, spy = Probe(method.target_key), Spy(method.target_key)
    Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=batch_size),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[probe, method],
        callbacks=[spy],
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    ).fit()
    return probe, spy


def test_the_loss_sees_smoothed_targets_and_the_originals_are_restored_exactly() -> None:
    probe, spy = _train(LabelSmoothing(smoothing=0.2))
    assert len(spy.smoothed) == 2
    for y, copy, smoothed, restored, outputs, loss in zip(
        probe.targets, probe.copies, spy.smoothed, probe.restored, spy.outputs, spy.losses
    ):
        torch.testing.assert_close(smoothed, F.one_hot(y, NUM_CLASSES).float() * 0.8 + 0.05)
        torch.testing.assert_close(smoothed.sum(dim=1), torch.ones(len(y)))
        assert restored is y and torch.equal(restored, copy)  # the same object, with the same values
        # torch's own label_smoothing uses the same definition
        torch.testing.assert_close(loss, F.cross_entropy(outputs, y, label_smoothing=0.2))


def test_microbatches_are_smoothed_and_restored_one_by_one() -> None:
    probe, spy = _train(LabelSmoothing(), batch_size=8, device_train_microbatch_size=4)
    assert len(spy.smoothed) == 4  # 2 batches x 2 microbatches
    for y, smoothed, restored in zip(probe.targets, spy.smoothed, probe.restored):
        assert len(y) == 4 and restored is y
        torch.testing.assert_close(smoothed, F.one_hot(y, NUM_CLASSES).float() * 0.9 + 0.025)


def test_dict_batches_through_target_key() -> None:
    model, dataset = DictImageClassifier(NUM_CLASSES), DictImageDataset(8, NUM_CLASSES)
    probe, spy = _train(LabelSmoothing(target_key="label"), model=model, dataset=dataset)
    for y, smoothed, restored in zip(probe.targets, spy.smoothed, probe.restored):
        torch.testing.assert_close(smoothed, F.one_hot(y, NUM_CLASSES).float() * 0.9 + 0.025)
        assert restored is y


def test_getter_setter_key() -> None:
    def get(batch: Any) -> Any:
        return batch[1]

    def put(batch: Any, value: Any) -> Any:
        return (batch[0], value)

    method = LabelSmoothing(target_key=(get, put))
    assert "0x" not in repr(method) and "get" in repr(method)
    probe, spy = _train(method)
    assert spy.smoothed[0].is_floating_point() and probe.restored[0] is probe.targets[0]


def test_effects_declare_targets_only() -> None:
    effects = LabelSmoothing().effects()
    assert not effects.exclusive and not effects.conflicts
    assert {r.value for r in effects.writes} == {"targets"}


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"smoothing": -0.01}, ValueError, "`smoothing`"),
        ({"smoothing": 1.01}, ValueError, "`smoothing`"),
        ({"smoothing": "0.1"}, TypeError, "`smoothing`"),
        ({"smoothing": None}, TypeError, "`smoothing`"),
        ({"target_key": 1.0}, TypeError, "`target_key`"),
        ({"target_key": True}, TypeError, "`target_key`"),
    ],
)
def test_bad_hyperparameters_are_rejected_at_construction(kwargs: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        LabelSmoothing(**kwargs)


def test_bounds_are_accepted_and_match_only_loss_events() -> None:
    LabelSmoothing(smoothing=0)
    LabelSmoothing(smoothing=1)
    state: Any = None
    method = LabelSmoothing()
    assert method.match(Event.BEFORE_LOSS, state) and method.match(Event.AFTER_LOSS, state)
    assert not method.match(Event.BEFORE_FORWARD, state)
