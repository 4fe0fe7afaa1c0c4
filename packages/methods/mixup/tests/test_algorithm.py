"""`MixUp` inside the real Trainer: events, keys, dict batches, microbatches, validation."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cadence_mixup import MixUp
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Event, MethodConflictError, Trainer
from cadence.engine import check_composition
from cadence.testing import DictImageClassifier, DictImageDataset, image_dataset, tiny_image_classifier

NUM_CLASSES = 4


class Probe(Algorithm):
    """The outermost method: sees each microbatch before MixUp changes it and after MixUp restores it."""

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
    """Runs after every method: records what the model and the loss saw, and MixUp's draws."""

    def __init__(self, method: MixUp):
        self.method = method
        self.mixed: list[torch.Tensor] = []
        self.draws: list[tuple[torch.Tensor, float]] = []
        self.targets: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def before_forward(self, state: Any, logger: Any) -> None:
        assert self.method.indices is not None
        self.mixed.append(state.batch_get_item(self.method.input_key))
        self.draws.append((self.method.indices.clone(), self.method.mixing))

    def before_loss(self, state: Any, logger: Any) -> None:
        self.targets.append(state.batch_get_item(self.method.target_key))
        self.outputs.append(state.outputs.detach())

    def after_loss(self, state: Any, logger: Any) -> None:
        self.losses.append(state.loss.detach())


def _train(
    method: MixUp,
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


def test_inputs_and_dense_targets_are_mixed_with_one_permutation_and_restored() -> None:
    method = MixUp(alpha=1.0)
    _, probe, spy = _train(method)
    assert len(spy.draws) == 2
    for x, y, mixed, (perm, m), target, restored in zip(
        probe.inputs, probe.targets, spy.mixed, spy.draws, spy.targets, probe.restored
    ):
        assert 0.0 <= m <= 0.5
        torch.testing.assert_close(mixed, (1 - m) * x + m * x[perm], rtol=0, atol=1e-6)
        expected = (1 - m) * F.one_hot(y, NUM_CLASSES).float() + m * F.one_hot(y[perm], NUM_CLASSES).float()
        torch.testing.assert_close(target, expected)
        torch.testing.assert_close(target.sum(dim=1), torch.ones(len(y)))
        assert restored is y  # AFTER_LOSS puts the very same target object back


def test_already_dense_targets_are_mixed_too() -> None:
    images = torch.rand(8, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = F.one_hot(torch.arange(8) % NUM_CLASSES, NUM_CLASSES).float()
    method = MixUp(alpha=1.0)
    _, probe, spy = _train(method, dataset=torch.utils.data.TensorDataset(images, labels))
    for y, (perm, m), target in zip(probe.targets, spy.draws, spy.targets):
        torch.testing.assert_close(target, (1 - m) * y + m * y[perm])


def test_loss_interpolation_equals_target_interpolation_through_the_trainer() -> None:
    by_targets, _, spy_t = _train(MixUp(alpha=1.0), duration="3ba")
    by_loss, probe, spy_l = _train(MixUp(alpha=1.0, interpolate_loss=True), duration="3ba")
    for (perm_t, m_t), (perm_l, m_l) in zip(spy_t.draws, spy_l.draws):
        assert torch.equal(perm_t, perm_l) and m_t == m_l  # the same seed draws the same mixing in both modes
    for loss_t, loss_l in zip(spy_t.losses, spy_l.losses):
        assert abs(loss_t.item() - loss_l.item()) <= 1e-6
    for y, restored in zip(probe.targets, probe.restored):
        assert restored is y  # interpolate_loss leaves the targets alone
    for a, b in zip(by_targets.state.model.parameters(), by_loss.state.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_each_microbatch_draws_its_own_mixing_and_mixes_within_itself() -> None:
    method = MixUp(alpha=1.0)
    _, probe, spy = _train(method, samples=8, batch_size=8, duration="1ba", device_train_microbatch_size=4)
    assert len(spy.draws) == 2  # two microbatches of 4
    for x, mixed, (perm, m) in zip(probe.inputs, spy.mixed, spy.draws):
        assert x.shape[0] == 4 and sorted(perm.tolist()) == [0, 1, 2, 3]
        torch.testing.assert_close(mixed, (1 - m) * x + m * x[perm], rtol=0, atol=1e-6)
    assert spy.draws[0][1] != spy.draws[1][1]
    _, _, whole = _train(MixUp(alpha=1.0), samples=8, batch_size=8, duration="1ba")
    assert len(whole.draws) == 1 and torch.isfinite(whole.losses[0])


@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_dict_batches_through_input_key_and_target_key(interpolate_loss: bool) -> None:
    method = MixUp(alpha=1.0, interpolate_loss=interpolate_loss, input_key="image", target_key="label")
    _, probe, spy = _train(method, model=DictImageClassifier(NUM_CLASSES), dataset=DictImageDataset(8, NUM_CLASSES))
    for x, mixed, (perm, m), target in zip(probe.inputs, spy.mixed, spy.draws, spy.targets):
        torch.testing.assert_close(mixed, (1 - m) * x + m * x[perm], rtol=0, atol=1e-6)
        assert target.is_floating_point() != interpolate_loss


def test_getter_setter_keys() -> None:
    def get(batch: Any) -> Any:
        return batch[0]

    def put(batch: Any, value: Any) -> Any:
        return (value, batch[1])

    method = MixUp(input_key=(get, put))
    assert "0x" not in repr(method) and "get" in repr(method)
    _, probe, spy = _train(method)
    assert not torch.equal(probe.inputs[0], spy.mixed[0])


def test_effects_and_conflicts() -> None:
    with pytest.raises(MethodConflictError, match="MixUp is listed twice"):  # it would mix every batch twice
        check_composition([MixUp(), MixUp()])
    assert not MixUp().effects().exclusive
    with pytest.raises(MethodConflictError, match=r"MixUp and MixUp .*loss"):
        check_composition([MixUp(interpolate_loss=True), MixUp(interpolate_loss=True)])


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"alpha": 0}, ValueError, "`alpha`"),
        ({"alpha": -0.5}, ValueError, "`alpha`"),
        ({"alpha": None}, ValueError, "`alpha`"),
        ({"interpolate_loss": "yes"}, TypeError, "`interpolate_loss`"),
        ({"input_key": 1.5}, TypeError, "`input_key`"),
        ({"input_key": True}, TypeError, "`input_key`"),
        ({"target_key": None}, TypeError, "`target_key`"),
        ({"target_key": ("a", "b")}, TypeError, "`target_key`"),
    ],
)
def test_bad_hyperparameters_are_rejected_at_construction(kwargs: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        MixUp(**kwargs)


def test_matches_only_its_mode_events() -> None:
    state: Any = None
    assert MixUp().match(Event.BEFORE_LOSS, state)
    assert not MixUp(interpolate_loss=True).match(Event.BEFORE_LOSS, state)
    assert not MixUp().match(Event.AFTER_DATALOADER, state)


def test_composer_attributes_describe_the_last_step_and_stay_out_of_checkpoints() -> None:
    """Composer's MixUp exposes ``mixing``, ``indices`` and ``permuted_target`` (empty before the first step)."""
    from cadence import Logger, State

    method = MixUp(alpha=1.0, seed=2)
    assert method.mixing == 0.0 and method.indices.numel() == 0 and method.permuted_target.numel() == 0
    x, y = torch.rand(6, 3, 4, 4), torch.arange(6)
    state = State(model=tiny_image_classifier(NUM_CLASSES))
    state.batch = (x, y)
    method.apply(Event.INIT, state, Logger(state))
    method.apply(Event.BEFORE_FORWARD, state, Logger(state))
    m, indices = method.mixing, method.indices
    assert 0 <= m <= 0.5 and sorted(indices.tolist()) == list(range(6))
    assert torch.allclose(state.batch[0], (1 - m) * x + m * x[indices])
    assert torch.equal(method.permuted_target, y[indices])
    assert set(method.state_dict()) == {"rng"}  # the next step draws anew from the generators
