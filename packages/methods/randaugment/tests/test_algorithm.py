"""RandAugment adapter: events, batch keys, the dataset-transform path, validation."""

from __future__ import annotations

import pytest
import torch
from cadence_randaugment import RandAugment, RandAugmentTransform
from torch.utils.data import DataLoader, Dataset

from cadence import Callback, Event, Resource, State, Trainer
from cadence.testing import tiny_image_classifier


def _state(batch) -> State:
    state = State(model=tiny_image_classifier(), max_duration="1ep")
    state.batch = batch
    return state


def test_batched_path_runs_after_the_dataloader() -> None:
    algorithm = RandAugment()
    state = _state((torch.rand(4, 3, 8, 8), torch.arange(4)))
    assert algorithm.match(Event.INIT, state) and algorithm.match(Event.AFTER_DATALOADER, state)
    assert not algorithm.match(Event.FIT_START, state) and not algorithm.match(Event.BEFORE_FORWARD, state)
    algorithm.apply(Event.INIT, state, None)
    images, targets = state.batch
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    assert state.batch[0].shape == images.shape and not torch.equal(state.batch[0], images)
    assert state.batch[1] is targets
    assert algorithm.effects().writes == {Resource.INPUTS}


def test_dict_batches_and_the_users_batch_is_not_mutated() -> None:
    images = torch.rand(4, 3, 8, 8)
    batch = {"image": images, "label": torch.arange(4)}
    state = _state(batch)
    algorithm = RandAugment(input_key="image")
    algorithm.apply(Event.INIT, state, None)
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    assert batch["image"] is images and state.batch is not batch
    assert not torch.equal(state.batch["image"], images)


def test_rejects_images_it_cannot_augment() -> None:
    state = _state((torch.zeros(2, 3, 8, 8, dtype=torch.long), torch.arange(2)))
    algorithm = RandAugment()
    algorithm.apply(Event.INIT, state, None)
    with pytest.raises(TypeError, match="unnormalised"):
        algorithm.apply(Event.AFTER_DATALOADER, state, None)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"severity": 12}, ValueError),
        ({"depth": 0}, ValueError),
        ({"augmentation_set": "x"}, ValueError),
        ({"batched": "yes"}, TypeError),
    ],
)
def test_bad_hyperparameters_fail_at_construction(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        RandAugment(**kwargs)


def test_repr_names_every_hyperparameter() -> None:
    text = repr(RandAugment(severity=5, depth=1, augmentation_set="safe", batched=False))
    assert text == "RandAugment(severity=5, depth=1, augmentation_set='safe', batched=False, input_key=0, seed=None)"


class WhiteImages(Dataset):
    """A torchvision-style dataset: ``transform`` runs on each raw uint8 CHW image."""

    def __init__(self, n: int = 8):
        self.n, self.transform = n, None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        image = torch.full((3, 8, 8), 255, dtype=torch.uint8)
        image = self.transform(image) if self.transform is not None else image
        return image.float() / 255, index % 4


class Batches(Callback):
    def __init__(self):
        self.inputs: list[torch.Tensor] = []

    def run_event(self, event, state, logger) -> None:
        if event is Event.AFTER_DATALOADER:
            self.inputs.append(state.batch[0])


@pytest.mark.parametrize("loader_kwargs", [{}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}])
def test_dataset_path_reaches_the_loader_and_its_workers(loader_kwargs: dict) -> None:
    # posterize always changes white (255 -> 240 or less), so every augmented image is < 1
    dataset, seen = WhiteImages(), Batches()
    algorithm = RandAugment(depth=1, augmentation_set=["posterize"], batched=False)
    model = tiny_image_classifier()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4, **loader_kwargs),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=[algorithm],
        callbacks=[seen],
        device="cpu",
        seed=0,
        progress_bar=False,
    )
    trainer.fit()
    assert isinstance(dataset.transform, RandAugmentTransform)
    assert all(batch.max() < 1 for batch in seen.inputs) and len(seen.inputs) == 2
    assert algorithm.effects().writes == {Resource.DATA}
    trainer.state.max_duration = trainer.state.max_duration + trainer.state.max_duration
    trainer.fit()  # a second fit must not add the transform twice
    assert isinstance(dataset.transform, RandAugmentTransform)


def test_dataset_path_needs_a_dataset_with_a_transform() -> None:
    algorithm = RandAugment(batched=False)
    state = _state(None)
    state.dataloader = DataLoader(torch.utils.data.TensorDataset(torch.rand(4, 3, 8, 8)))
    assert algorithm.match(Event.FIT_START, state)
    with pytest.raises(TypeError, match="no `transform` attribute"):
        algorithm.apply(Event.FIT_START, state, None)


def test_normalised_batches_train_as_in_composer() -> None:
    """Composer's RandAugment trains on normalised float images; so does this one (in each image's own range)."""
    normalised = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 2
    state = _state((normalised, torch.arange(4)))
    algorithm = RandAugment()
    algorithm.apply(Event.INIT, state, None)
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    out = state.batch[0]
    assert out.shape == normalised.shape and torch.isfinite(out).all() and not torch.equal(out, normalised)
    low, high = normalised.amin(dim=(1, 2, 3)), normalised.amax(dim=(1, 2, 3))
    assert (out.amin(dim=(1, 2, 3)) >= low).all() and (out.amax(dim=(1, 2, 3)) <= high).all()
