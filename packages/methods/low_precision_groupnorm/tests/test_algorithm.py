"""LowPrecisionGroupNorm in the Trainer: INIT only, the run's precision decides, checkpoints need the surgery."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_low_precision_groupnorm import LowPrecisionGroupNorm, LPGroupNorm
from torch import nn
from torch.utils.data import DataLoader

from cadence import (
    CheckpointMismatchError,
    Classifier,
    Event,
    MethodError,
    NotApplicableError,
    Resource,
    State,
    Trainer,
)
from cadence.ops import NoEffectError, NoEffectWarning
from cadence.testing import image_dataset, tiny_image_classifier


def _model() -> Classifier:
    torch.manual_seed(0)  # a fresh, unmodified model, as the user's code builds it
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 4),
    )  # fmt: skip
    return Classifier(module, num_classes=4)


def _trainer(algorithms: list, precision: str = "amp_bf16", **kwargs) -> Trainer:
    model = _model()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16, shape=(3, 16, 16), seed=1), batch_size=4),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=algorithms,
        precision=precision,
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def test_runs_on_init_only_and_declares_what_it_changes() -> None:
    method = LowPrecisionGroupNorm()
    state = State(model=_model(), max_duration="1ba")
    assert [e for e in Event if method.match(e, state)] == [Event.INIT]
    assert type(method).order == 50 and method.required_on_load()
    assert method.effects().writes == {Resource.MODEL}
    assert repr(method) == "LowPrecisionGroupNorm(strict=False)"


def test_under_autocast_the_trainer_replaces_groupnorm_and_trains() -> None:
    trainer = _trainer([LowPrecisionGroupNorm()])
    norm = trainer.state.model.module[1]
    assert isinstance(norm, LPGroupNorm)
    assert trainer.state.algorithms[0].report.replaced == {"GroupNorm -> LPGroupNorm": ["module.1"]}
    trainer.fit()
    assert norm.weight.grad is not None and norm.weight.dtype == torch.float32


def test_in_fp32_it_changes_nothing_and_says_so() -> None:
    with pytest.warns(NoEffectWarning, match="precision='fp32'"):
        trainer = _trainer([LowPrecisionGroupNorm()], precision="fp32")
    assert type(trainer.state.model.module[1]) is nn.GroupNorm
    with pytest.raises(MethodError, match="LowPrecisionGroupNorm failed on event 'init': NoEffectError") as error:
        _trainer([LowPrecisionGroupNorm(strict=True)], precision="fp32")
    assert isinstance(error.value.__cause__, NoEffectError)


def test_a_checkpoint_after_the_surgery_loads_into_a_fresh_model_only_with_the_method(tmp_path: Path) -> None:
    trained = _trainer([LowPrecisionGroupNorm()], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([LowPrecisionGroupNorm()], load_path=checkpoint)
    x = torch.rand(2, 3, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    with pytest.raises(CheckpointMismatchError, match=r"add LowPrecisionGroupNorm\(\)"):
        _trainer([], load_path=checkpoint)


def test_a_model_without_groupnorm_is_refused_before_training() -> None:
    batch = (torch.rand(2, 3, 8, 8), torch.tensor([0, 1]))
    with pytest.raises(NotApplicableError, match=r"LowPrecisionGroupNorm replaces torch\.nn\.GroupNorm layers"):
        LowPrecisionGroupNorm().check_applicable(tiny_image_classifier(), batch)
    LowPrecisionGroupNorm().check_applicable(_model(), batch)


def test_bad_hyperparameters_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="`strict`='yes'"):
        LowPrecisionGroupNorm(strict="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LowPrecisionGroupNorm("amp_bf16")  # type: ignore[misc] -- the precision is the run's, never an argument
