"""ChannelsLast adapter: INIT only, last of the surgeries, and checkpoints that load into either layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_channels_last import ChannelsLast

from cadence import Event, InMemoryLogger, Resource, Trainer
from cadence.testing import image_dataset, sgd_trainer, tiny_image_classifier


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torch.manual_seed(0)
    return sgd_trainer(tiny_image_classifier(), image_dataset(8), algorithms, lr=0.1, seed=1, shuffle=False, **kwargs)


def test_declarations() -> None:
    algorithm = ChannelsLast()
    assert algorithm.events == (Event.INIT,) and repr(algorithm) == "ChannelsLast(strict=False)"
    assert not algorithm.required_on_load()  # a memory layout: nothing to re-apply before loading weights
    assert algorithm.effects().writes == {Resource.MODEL}
    with pytest.raises(ValueError, match="`strict`"):
        ChannelsLast(strict=1)  # type: ignore[arg-type]


def test_the_trainer_applies_it_and_logs_the_report() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([ChannelsLast()], loggers=[logger])
    conv = trainer.state.model.module.features[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    assert logger.hyperparameters == {"ChannelsLast/Conv2d to channels_last": 2}
    trainer.fit()
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)  # stays so through the optimizer steps


def test_checkpoints_load_across_layouts(tmp_path: Path) -> None:
    last = _trainer([ChannelsLast()], save_folder=tmp_path / "last", save_interval="2ba")
    last.fit()
    plain = _trainer([], load_path=tmp_path / "last" / "ep0-ba2.pt")  # no surgery recorded: loads as is
    again = _trainer([ChannelsLast()], load_path=tmp_path / "last" / "ep0-ba2.pt")
    x = torch.rand(2, 3, 32, 32)
    outputs = [t.state.model.eval().module(x) for t in (last, plain, again)]
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6) and torch.equal(outputs[0], outputs[2])
    assert again.state.model.module.features[0].weight.is_contiguous(memory_format=torch.channels_last)
