"""ColOut adapter: batch and sample modes, batch keys, targets, validation, generator state."""

from __future__ import annotations

import pytest
import torch
from cadence_colout import ColOut, ColOutTransform
from torch.utils.data import DataLoader, Dataset

from cadence import Callback, Event, Logger, Resource, State, Trainer
from cadence.testing import tiny_image_classifier


def _run(algorithm: ColOut, batch: object) -> State:
    state = State(model=tiny_image_classifier(), max_duration="4ba")
    state.batch = batch
    for event in (Event.INIT, Event.AFTER_DATALOADER):
        assert algorithm.match(event, state)
        algorithm.apply(event, state, Logger(state))
    return state


def test_batch_mode_matches_init_and_after_dataloader() -> None:
    state = State(model=tiny_image_classifier())
    assert [e for e in Event if ColOut().match(e, state)] == [Event.INIT, Event.AFTER_DATALOADER]


def test_sample_mode_matches_fit_start_never_after_dataloader() -> None:
    """Composer: ColOut(batch=False) acts at FIT_START (a dataset transform), not on the batch."""
    state = State(model=tiny_image_classifier())
    state.dataloader = DataLoader(CodedImages())
    assert [e for e in Event if ColOut(batch=False).match(e, state)] == [Event.INIT, Event.FIT_START]


def test_batch_mode_drops_lines_and_leaves_labels() -> None:
    x, y = torch.rand(4, 3, 20, 20), torch.arange(4)
    batch = (x, y)
    state = _run(ColOut(), batch)
    assert state.batch[0].shape == (4, 3, 17, 17) and state.batch[1] is y and batch[0] is x


class CodedImages(Dataset):
    """A torchvision-style dataset: ``transform`` runs on each raw CHW image, whose pixels encode (row, col)."""

    def __init__(self, n: int = 8):
        self.n, self.transform = n, None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        image = (torch.arange(24)[:, None] * 100 + torch.arange(24)[None, :]).float().expand(1, 24, 24).clone()
        image = self.transform(image) if self.transform is not None else image
        return image, index % 4


class Batches(Callback):
    def __init__(self):
        self.inputs: list[torch.Tensor] = []

    def run_event(self, event, state, logger) -> None:
        if event is Event.AFTER_DATALOADER:
            self.inputs.append(state.batch[0])


def test_sample_mode_adds_a_dataset_transform_at_fit_start() -> None:
    dataset, seen = CodedImages(), Batches()
    algorithm = ColOut(p_row=0.5, p_col=0.5, batch=False)
    model = tiny_image_classifier(in_channels=1)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=8),
        max_duration="1ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=[algorithm],
        callbacks=[seen],
        device="cpu",
        seed=0,
        progress_bar=False,
    )
    trainer.fit()
    assert isinstance(dataset.transform, ColOutTransform)
    rows = seen.inputs[0][:, 0, :, 0]  # each image kept its own 12 rows
    assert rows.shape == (8, 12) and any(not torch.equal(rows[0], r) for r in rows[1:])
    assert algorithm.effects().writes == {Resource.DATA}
    trainer.state.max_duration = trainer.state.max_duration + trainer.state.max_duration
    trainer.fit()  # a second fit must not add the transform twice
    assert isinstance(dataset.transform, ColOutTransform) and seen.inputs[-1].shape[-2:] == (12, 12)


def test_sample_mode_needs_a_dataset_with_a_transform() -> None:
    algorithm = ColOut(batch=False)
    state = State(model=tiny_image_classifier())
    state.dataloader = DataLoader(torch.utils.data.TensorDataset(torch.rand(4, 3, 8, 8)))
    algorithm.apply(Event.INIT, state, Logger(state))
    with pytest.raises(TypeError, match="no `transform` attribute"):
        algorithm.apply(Event.FIT_START, state, Logger(state))


def test_dict_batch_with_segmentation_target() -> None:
    batch = {"image": torch.rand(2, 3, 10, 10), "mask": torch.zeros(2, 10, 10, dtype=torch.long)}
    state = _run(ColOut(p_row=0.5, p_col=0.2, input_key="image", target_key="mask"), batch)
    assert state.batch["image"].shape == (2, 3, 5, 8) and state.batch["mask"].shape == (2, 5, 8)
    assert batch["mask"].shape == (2, 10, 10)


def test_resize_target_false_never_reads_the_target() -> None:
    state = _run(ColOut(resize_target=False, input_key="image"), {"image": torch.rand(2, 3, 10, 10)})
    assert state.batch["image"].shape == (2, 3, 8, 8)


def test_generator_state_resumes_the_same_lines() -> None:
    x = torch.rand(4, 3, 16, 16)
    first = ColOut(seed=4)
    _run(first, (x, torch.arange(4)))
    second = ColOut(seed=4)
    second.load_state_dict(first.state_dict())
    state_a = State(model=tiny_image_classifier())
    state_a.batch = (x, torch.arange(4))
    first.apply(Event.AFTER_DATALOADER, state_a, Logger(state_a))
    assert torch.equal(state_a.batch[0], _run(second, (x, torch.arange(4))).batch[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"p_row": 1.0}, ValueError, "`p_row`"),
        ({"p_col": -0.1}, ValueError, "`p_col`"),
        ({"resize_target": "always"}, ValueError, "`resize_target`"),
        ({"batch": "yes"}, TypeError, "`batch`"),
        ({"batch": False, "resize_target": True}, ValueError, "resize_target=True"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ColOut(**kwargs)


def test_effects_and_repr() -> None:
    assert ColOut().effects().writes == {Resource.INPUTS, Resource.TARGETS}
    assert ColOut(resize_target=False).effects().writes == {Resource.INPUTS}
    assert repr(ColOut(batch=False)) == (
        "ColOut(p_row=0.15, p_col=0.15, batch=False, resize_target='auto', input_key=0, target_key=1, seed=None)"
    )
