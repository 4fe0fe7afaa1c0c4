"""AugMix adapter: events, batch keys, the dataset-transform path, validation."""

from __future__ import annotations

import pytest
import torch
from cadence_augmix import AugmentAndMixTransform, AugMix
from torch.utils.data import DataLoader, Dataset

from cadence import Callback, Event, Resource, State, Trainer
from cadence.testing import tiny_image_classifier


def _state(batch) -> State:
    state = State(model=tiny_image_classifier(), max_duration="1ep")
    state.batch = batch
    return state


def test_batched_path_runs_after_the_dataloader() -> None:
    algorithm = AugMix()
    state = _state((torch.rand(4, 3, 8, 8), torch.arange(4)))
    assert algorithm.match(Event.INIT, state) and algorithm.match(Event.AFTER_DATALOADER, state)
    assert not algorithm.match(Event.FIT_START, state)
    algorithm.apply(Event.INIT, state, None)
    images = state.batch[0]
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    assert state.batch[0].shape == images.shape and not torch.equal(state.batch[0], images)
    assert algorithm.effects().writes == {Resource.INPUTS}


def test_dict_batches_and_the_users_batch_is_not_mutated() -> None:
    images = torch.rand(4, 3, 8, 8)
    batch = {"pixels": images, "label": torch.arange(4)}
    state = _state(batch)
    algorithm = AugMix(input_key="pixels")
    algorithm.apply(Event.INIT, state, None)
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    assert batch["pixels"] is images and not torch.equal(state.batch["pixels"], images)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"severity": 0}, ValueError),
        ({"depth": -3}, ValueError),
        ({"width": 0}, ValueError),
        ({"alpha": -1.0}, ValueError),
        ({"augmentation_set": "x"}, ValueError),
        ({"batched": 1}, TypeError),
    ],
)
def test_bad_hyperparameters_fail_at_construction(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        AugMix(**kwargs)


def test_repr_names_every_hyperparameter() -> None:
    assert repr(AugMix()) == (
        "AugMix(severity=3, depth=-1, width=3, alpha=1.0, augmentation_set='all', batched=True, input_key=0, seed=None)"
    )


class WhiteImages(Dataset):
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


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataset_path_reaches_the_loader_and_its_workers(num_workers: int) -> None:
    # every chain posterizes white to <= 240, and Beta(1, 1) mixes in some of it: the images get darker
    dataset, seen = WhiteImages(), Batches()
    algorithm = AugMix(depth=1, augmentation_set=["posterize"], batched=False)
    model = tiny_image_classifier()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4, num_workers=num_workers),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=[algorithm],
        callbacks=[seen],
        device="cpu",
        seed=0,
        progress_bar=False,
    )
    trainer.fit()
    assert isinstance(dataset.transform, AugmentAndMixTransform)
    assert torch.cat(seen.inputs).flatten(1).amax(1).lt(1).float().mean() > 0.5
    assert algorithm.effects().writes == {Resource.DATA}
