"""SelectiveBackprop adapter: the window, pruning every batch form, BatchNorm, early loss checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cadence_selective_backprop import SelectiveBackprop
from torch.utils.data import DataLoader

from cadence import Classifier, Event, Logger, MethodError, NotApplicableError, Resource, State, Timestamp, Trainer
from cadence.testing import TinyCNN, image_dataset, tiny_image_classifier


def _state(batch: object = None, at_batch: int = 0, batch_in_epoch: int | None = None, model=None) -> State:
    state = State(model=model or tiny_image_classifier(), max_duration="10ba")
    state.batch = batch
    in_epoch = at_batch if batch_in_epoch is None else batch_in_epoch
    state.timestamp = Timestamp(batch=at_batch, batch_in_epoch=in_epoch)
    return state


def _apply(algorithm: SelectiveBackprop, state: State) -> State:
    algorithm.apply(Event.INIT, state, Logger(state))
    algorithm.apply(Event.AFTER_DATALOADER, state, Logger(state))
    return state


@pytest.mark.parametrize(
    ("at_batch", "batch_in_epoch", "expected"),
    [(0, 0, False), (4, 0, False), (5, 0, True), (5, 1, False), (6, 2, True), (8, 0, True), (9, 0, False)],
)
def test_matches_inside_the_window_except_interrupt_batches(at_batch: int, batch_in_epoch: int, expected: bool) -> None:
    algorithm = SelectiveBackprop()  # start 0.5, end 0.9, interrupt 2 over 10 batches
    assert algorithm.match(Event.AFTER_DATALOADER, _state(None, at_batch, batch_in_epoch)) is expected


def test_matches_init_and_never_with_keep_one() -> None:
    state = _state(None, 5, batch_in_epoch=0)
    assert [e for e in Event if SelectiveBackprop().match(e, state)] == [Event.INIT, Event.AFTER_DATALOADER]
    assert not SelectiveBackprop(keep=1.0).match(Event.AFTER_DATALOADER, state)


def test_prunes_a_tuple_batch_keeping_pairs() -> None:
    x = torch.rand(8, 3, 8, 8) + torch.arange(8).view(8, 1, 1, 1) * 10  # sample i has values in [10i, 10i + 1)
    y = torch.arange(8) % 4
    state = _apply(SelectiveBackprop(keep=0.5, seed=0), _state((x, y)))
    new_x, new_y = state.batch
    ids = (new_x[:, 0, 0, 0] // 10).long()
    assert new_x.shape == (4, 3, 8, 8) and torch.equal(new_y, ids % 4)


def test_dict_batch_prunes_every_per_sample_tensor() -> None:
    class DictClassifier(Classifier):
        def forward(self, batch):
            return self.module(batch["image"])

        def loss(self, outputs, batch, **kwargs):
            return F.cross_entropy(outputs, batch["label"], **kwargs)

    batch = {"image": torch.rand(6, 3, 8, 8), "label": torch.arange(6) % 4, "weight": torch.rand(6), "name": "b"}
    algorithm = SelectiveBackprop(keep=0.5, input_key="image", target_key="label")
    state = _apply(algorithm, _state(batch, model=DictClassifier(TinyCNN(), num_classes=4)))
    assert state.batch["image"].shape[0] == state.batch["label"].shape[0] == state.batch["weight"].shape[0] == 3
    assert state.batch["name"] == "b" and batch["image"].shape[0] == 6  # the user's batch is untouched


def test_scoring_leaves_batchnorm_statistics_and_train_flags_alone() -> None:
    model = tiny_image_classifier()
    model.train()
    model.module.head.eval()  # a user's own choice of mode must survive the scoring pass
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = _apply(SelectiveBackprop(keep=0.5), _state((torch.rand(8, 3, 8, 8), torch.arange(8) % 4), model=model))
    assert state.batch[0].shape[0] == 4
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} changed during scoring"
    assert model.training and model.module.features[1].training and not model.module.head.training


def test_train_mode_scoring_would_have_moved_the_statistics() -> None:
    """Why eval mode: the same forward in train mode updates BatchNorm's running statistics."""
    model = tiny_image_classifier().train()
    before = model.module.features[1].running_mean.clone()
    with torch.no_grad():
        model((torch.rand(8, 3, 8, 8), None))
    assert not torch.equal(before, model.module.features[1].running_mean)


def test_batch_of_one_is_left_as_is() -> None:
    batch = (torch.rand(1, 3, 8, 8), torch.arange(1))
    state = _apply(SelectiveBackprop(keep=0.5), _state(batch))
    assert state.batch is batch


def test_loss_without_reduction_fails_at_construction_of_the_trainer() -> None:
    model = Classifier(TinyCNN(), num_classes=4, loss_fn=lambda outputs, target: F.cross_entropy(outputs, target))
    loader = DataLoader(image_dataset(8), batch_size=4)
    with pytest.raises(MethodError, match="reduction"):
        Trainer(
            model=model,
            train_dataloader=loader,
            max_duration="2ba",
            algorithms=[SelectiveBackprop()],
            device="cpu",
            progress_bar=False,
        )


def test_a_loss_that_takes_reduction_but_returns_one_number_is_refused_before_the_first_step() -> None:
    """Its signature passes the construction check; scoring the first batch before training finds it out, where
    the run would otherwise fail only once the method's window opens (here half-way)."""

    class MeanLoss(Classifier):
        def loss(self, outputs: torch.Tensor, batch: object, reduction: str = "mean") -> torch.Tensor:
            return F.cross_entropy(outputs, batch[1])  # type: ignore[index]  # ignores `reduction`

    model = MeanLoss(TinyCNN(), num_classes=4)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4),
        max_duration="2ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[SelectiveBackprop(start=0.5, end=1.0, keep=0.5, interrupt=0)],
        device="cpu",
        progress_bar=False,
    )
    with pytest.raises(NotApplicableError, match=r"must return per-sample losses \(4,\), got \(\)"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0


def test_needs_max_duration() -> None:
    state = State(model=tiny_image_classifier())
    with pytest.raises(ValueError, match="max_duration"):
        SelectiveBackprop().match(Event.AFTER_DATALOADER, state)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"start": 0.9, "end": 0.5}, "`start`"),
        ({"start": 0.5, "end": 0.5}, "`start`"),
        ({"start": -0.1}, "`start`"),
        ({"end": 1.5}, "`end`"),
        ({"start": 5, "end": 15}, "a start above 1 would never select"),  # fine in the functional, not here
        ({"keep": 0.0}, "`keep`"),
        ({"keep": 1.5}, "`keep`"),
        ({"scale_factor": 1.5}, "`scale_factor`"),
        ({"scale_factor": 0}, "`scale_factor`"),
        ({"interrupt": -1}, "`interrupt`"),
        ({"interrupt": 1.5}, "`interrupt`"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SelectiveBackprop(**kwargs)


def test_effects_order_and_repr() -> None:
    assert SelectiveBackprop().effects().writes == {Resource.INPUTS, Resource.TARGETS}
    assert SelectiveBackprop.order == 100
    assert repr(SelectiveBackprop()) == (
        "SelectiveBackprop(start=0.5, end=0.9, keep=0.5, scale_factor=1.0, interrupt=2, input_key=0, "
        "target_key=1, seed=None)"
    )
