"""GradientClipping in the trainer: on complete, unscaled gradients, right before the step."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_gradient_clipping import GradientClipping, apply_gradient_clipping
from torch.utils.data import DataLoader

from cadence import Event, Resource, State, Trainer
from cadence.testing import image_dataset, mlp_classifier, tiny_image_classifier


def test_declarations() -> None:
    algorithm = GradientClipping()
    assert (algorithm.clipping_type, algorithm.clipping_threshold) == ("norm", 1.0)
    state = State(model=tiny_image_classifier())
    assert [e for e in Event if algorithm.match(e, state)] == [Event.AFTER_TRAIN_BATCH]
    assert algorithm.effects().writes == {Resource.GRADIENTS}
    assert algorithm.effects().reads == {Resource.GRADIENTS}
    assert GradientClipping("adaptive", 0.01).effects().reads == {Resource.GRADIENTS, Resource.WEIGHTS}
    assert repr(GradientClipping("value", 2)) == "GradientClipping(clipping_type='value', clipping_threshold=2.0)"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"clipping_type": "adaptiv"}, "clipping_type"), ({"clipping_threshold": 0}, "clipping_threshold")],
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=f"`{name}`"):
        GradientClipping(**kwargs)


def _trainer(algorithm: GradientClipping, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = mlp_classifier(in_features=3 * 4 * 4, num_classes=4)
    model.module.insert(0, torch.nn.Flatten())
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16, shape=(3, 4, 4)), batch_size=8),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.5),
        algorithms=[algorithm],
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _gradients_at_each_step(trainer: Trainer) -> list[list[torch.Tensor]]:
    seen: list[list[torch.Tensor]] = []
    optimizer = trainer.state.optimizers[0]
    optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: seen.append([p.grad.clone() for p in opt.param_groups[0]["params"]])
    )
    trainer.fit()
    return seen


def test_the_step_sees_the_whole_batch_clipped_once() -> None:
    # microbatches of 2: clipping each microbatch would let the batch's norm reach 4x the threshold
    trainer = _trainer(GradientClipping("norm", 0.05), device_train_microbatch_size=2)
    steps = _gradients_at_each_step(trainer)
    assert len(steps) == 4
    for grads in steps:
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        assert float(norm) == pytest.approx(0.05, rel=1e-5)


def test_fp16_gradients_are_clipped_after_unscaling() -> None:
    trainer = _trainer(GradientClipping("value", 1e-3), precision="amp_fp16")
    assert trainer.state.scaler is not None and trainer.state.scaler.is_enabled()
    steps = _gradients_at_each_step(trainer)
    assert steps, "no step was taken"
    for grads in steps:  # clipping the scaled gradients would leave them 1/65536 of the threshold
        assert float(torch.stack([g.abs().max() for g in grads]).max()) == pytest.approx(1e-3)


def test_equals_clipping_by_hand_between_backward_and_step() -> None:
    trainer = _trainer(GradientClipping("adaptive", 0.02))
    model = copy.deepcopy(trainer.state.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    trainer.fit()
    loader = DataLoader(image_dataset(16, shape=(3, 4, 4)), batch_size=8)  # not shuffled: the trainer's order
    for batch in [batch for _ in range(2) for batch in loader]:
        optimizer.zero_grad()
        model.loss(model(batch), batch).backward()
        apply_gradient_clipping(model, "adaptive", 0.02)
        optimizer.step()
    for ours, theirs in zip(trainer.state.model.parameters(), model.parameters()):
        assert torch.equal(ours, theirs)
