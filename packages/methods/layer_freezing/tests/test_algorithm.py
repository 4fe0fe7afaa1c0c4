"""LayerFreezing adapter: events, effects, logging, and a run resumed after layers froze equal to the
uninterrupted one (the optimizer with fewer parameters loads from the checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_layer_freezing import LayerFreezing, freezable_layers

import cadence
from cadence import Event, InMemoryLogger, Resource, State, Trainer
from cadence.testing import assert_same_tensors, image_dataset, sgd_trainer, tiny_image_classifier


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()  # 4 freezable layers: conv, bn, conv, linear
    data = image_dataset(8)  # 2 batches per epoch
    return sgd_trainer(model, data, algorithms, max_duration="8ba", lr=0.05, seed=5, **kwargs)


def test_events_effects_and_repr() -> None:
    algorithm, state = LayerFreezing(), State(model=torch.nn.Linear(2, 2), max_duration="4ba")
    assert [e for e in Event if algorithm.match(e, state)] == [Event.INIT, Event.EPOCH_END]
    assert algorithm.effects().writes == {Resource.OPTIMIZER, Resource.GRADIENTS}
    assert algorithm.find_unused_parameters and not algorithm.required_on_load()
    assert repr(LayerFreezing(0.25, 0.5)) == "LayerFreezing(freeze_start=0.25, freeze_level=0.5)"


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"freeze_start": 1}, "`freeze_start`=1"), ({"freeze_level": -1}, "`freeze_level`=-1")]
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LayerFreezing(**kwargs)


def test_freezes_by_the_schedule_at_each_epoch_end_and_logs_it() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([LayerFreezing(freeze_start=0.0)], loggers=[logger])
    trainer.fit()
    _, depths = logger.steps_and_values("layer_freezing/layers_frozen")
    assert depths == [int(t / 8 * 3) for t in (2, 4, 6, 8)] == [0, 1, 2, 3]  # epoch ends at batches 2, 4, 6, 8
    layers = freezable_layers(trainer.state.model)
    assert [layer.weight.requires_grad for layer in layers] == [False, False, False, True]
    optimizer = trainer.state.optimizers[0]
    assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [id(p) for p in layers[-1].parameters()]


def test_a_run_resumed_after_layers_froze_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    whole = _trainer([LayerFreezing(freeze_start=0.0)], save_folder=tmp_path, save_interval="5ba")
    whole.fit()
    checkpoint = tmp_path / "ep2-ba5.pt"  # mid-epoch, after one layer froze at batch 4
    saved = torch.load(checkpoint, weights_only=True)["optimizers"][0]
    assert saved["layer_freezing"] == {"freeze_depth": 1} and len(saved["param_groups"][0]["params"]) == 6
    resumed = _trainer([LayerFreezing(freeze_start=0.0)], load_path=checkpoint)
    assert not freezable_layers(resumed.state.model)[0].weight.requires_grad  # frozen before the optimizer loaded
    resumed.fit()
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    assert_same_tensors(whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "optimizer")
    assert_same_tensors(whole.state.algorithms[0].state_dict(), resumed.state.algorithms[0].state_dict(), "method")
    flags = [[p.requires_grad for p in t.state.model.parameters()] for t in (whole, resumed)]
    assert flags[0] == flags[1]


def test_the_checkpoint_needs_the_method_to_load_once_layers_froze(tmp_path: Path) -> None:
    _trainer([LayerFreezing(freeze_start=0.0)], save_folder=tmp_path, save_interval="5ba").fit()
    with pytest.raises(cadence.CheckpointMismatchError, match=r"parameter group.*add LayerFreezing to algorithms="):
        _trainer([], load_path=tmp_path / "ep2-ba5.pt")
    plain = tmp_path / "plain"
    _trainer([], save_folder=plain, save_interval="5ba").fit()
    resumed = _trainer([LayerFreezing(freeze_start=0.0)], load_path=plain / "ep2-ba5.pt")  # nothing recorded
    assert all(p.requires_grad for p in resumed.state.model.parameters())
