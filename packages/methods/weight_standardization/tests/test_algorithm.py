"""WeightStandardization in the Trainer: INIT only, effects, checkpoints that need the same surgery."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_weight_standardization import WeightStandardization, is_standardized

from cadence import (
    CheckpointMismatchError,
    Classifier,
    Event,
    InMemoryLogger,
    NotApplicableError,
    Resource,
    State,
    Trainer,
)
from cadence.testing import image_dataset, mlp_classifier, sgd_trainer, tiny_image_classifier


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()  # a fresh, unmodified model, as the user's code builds it
    data = image_dataset(16, shape=(3, 16, 16), seed=1)
    return sgd_trainer(model, data, algorithms, lr=0.1, seed=3, shuffle=False, **kwargs)


def test_runs_on_init_only_and_declares_what_it_changes() -> None:
    method = WeightStandardization()
    state = State(model=tiny_image_classifier(), max_duration="1ba")
    assert [e for e in Event if method.match(e, state)] == [Event.INIT]
    assert type(method).order == 90 and method.required_on_load()
    effects = method.effects()
    assert effects.writes == {Resource.MODEL} and not effects.conflicts
    assert repr(WeightStandardization(2)) == "WeightStandardization(n_last_layers_ignore=2, strict=False)"


def test_the_trainer_standardizes_keeps_the_optimizer_and_records_the_report() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([WeightStandardization(n_last_layers_ignore=1)], loggers=[logger])
    assert logger.hyperparameters["WeightStandardization/num_weights_standardized"] == 1  # Composer's key
    model = trainer.state.model
    report = trainer.state.algorithms[0].report
    assert report.replaced == {"Conv2d -> standardized weight": ["module.features.0"]}  # the last conv is left
    assert is_standardized(model.module.features[0]) and not is_standardized(model.module.features[3])
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for g in trainer.state.optimizers[0].param_groups for p in g["params"]} == trainable
    assert "module.features.0.parametrizations.weight.original" in model.state_dict()
    trainer.fit()


def test_a_checkpoint_after_the_surgery_loads_into_a_fresh_model_only_with_the_method(tmp_path: Path) -> None:
    trained = _trainer([WeightStandardization()], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([WeightStandardization()], load_path=checkpoint)
    x = torch.rand(2, 3, 16, 16)
    trained.state.model.eval()
    resumed.state.model.eval()
    assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    with pytest.raises(CheckpointMismatchError, match=r"add WeightStandardization\(n_last_layers_ignore=0\)"):
        _trainer([], load_path=checkpoint)
    with pytest.raises(
        CheckpointMismatchError, match=r"this run applies WeightStandardization\(n_last_layers_ignore=1"
    ):
        _trainer([WeightStandardization(1)], load_path=checkpoint)


def test_a_model_without_convolutions_is_refused_before_training() -> None:
    with pytest.raises(NotApplicableError, match="WeightStandardization standardizes convolution weights"):
        WeightStandardization().check_applicable(mlp_classifier(), (torch.rand(2, 64), torch.tensor([0, 1])))
    WeightStandardization().check_applicable(Classifier(torch.nn.Conv2d(3, 4, 3), num_classes=4), None)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_last_layers_ignore": -1}, ValueError, "`n_last_layers_ignore`=-1 must be an int >= 0"),
        ({"n_last_layers_ignore": 0.5}, TypeError, "`n_last_layers_ignore`"),
        ({"strict": "yes"}, TypeError, "`strict`='yes'"),
    ],
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        WeightStandardization(**kwargs)
