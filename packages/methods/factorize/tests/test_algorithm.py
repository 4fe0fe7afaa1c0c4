"""Factorize in the Trainer: INIT only, Composer's class defaults, checkpoints that need the same surgery."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from cadence_factorize import Factorize, FactorizedConv2d, FactorizedLinear, apply_factorization

from cadence import CheckpointMismatchError, Event, InMemoryLogger, Resource, State, Trainer
from cadence.ops import NoEffectWarning
from cadence.testing import image_dataset, sgd_trainer, tiny_image_classifier

TINY = {"min_channels": 8, "latent_channels": 4, "min_features": 4, "latent_features": 1}


def _trainer(algorithms: list, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()  # a fresh, unmodified model, as the user's code builds it
    data = image_dataset(16, shape=(3, 16, 16), seed=1)
    return sgd_trainer(model, data, algorithms, lr=0.1, seed=3, shuffle=False, **kwargs)


def test_the_defaults_are_composers_which_differ_between_the_class_and_the_function() -> None:
    def defaults(callable_: object) -> dict:
        parameters = inspect.signature(callable_).parameters.values()  # type: ignore[arg-type]
        return {p.name: p.default for p in parameters if p.name.startswith(("min_", "latent_"))}

    assert defaults(Factorize) == {
        "min_channels": 256, "latent_channels": 0.25, "min_features": 256, "latent_features": 128,
    }  # fmt: skip
    assert defaults(apply_factorization) == {
        "min_channels": 512, "latent_channels": 0.25, "min_features": 512, "latent_features": 0.25,
    }  # fmt: skip


def test_runs_on_init_only_and_declares_what_it_changes() -> None:
    method = Factorize()
    state = State(model=tiny_image_classifier(), max_duration="1ba")
    assert [e for e in Event if method.match(e, state)] == [Event.INIT]
    assert type(method).order == 10 and method.required_on_load()
    assert method.effects().writes == {Resource.MODEL, Resource.WEIGHTS, Resource.OPTIMIZER}
    assert repr(method) == (
        "Factorize(factorize_convs=True, factorize_linears=True, min_channels=256, latent_channels=0.25, "
        "min_features=256, latent_features=128, strict=False)"
    )


def test_the_trainer_factorizes_and_the_optimizer_follows() -> None:
    trainer = _trainer([Factorize(**TINY)])
    model = trainer.state.model
    assert trainer.state.algorithms[0].report.replaced == {
        "Conv2d -> FactorizedConv2d": ["module.features.3"],  # 3 -> 8 is narrower than min_channels
        "Linear -> FactorizedLinear": ["module.head"],
    }
    assert isinstance(model.module.features[3], FactorizedConv2d) and isinstance(model.module.head, FactorizedLinear)
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for g in trainer.state.optimizers[0].param_groups for p in g["params"]} == trainable
    trainer.fit()


def test_a_checkpoint_after_the_surgery_loads_into_a_fresh_model_only_with_the_method(tmp_path: Path) -> None:
    trained = _trainer([Factorize(**TINY)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep0-ba2.pt"
    resumed = _trainer([Factorize(**TINY)], load_path=checkpoint)
    x = torch.rand(2, 3, 16, 16)
    trained.state.model.eval()
    resumed.state.model.eval()
    assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    with pytest.raises(CheckpointMismatchError, match=r"add Factorize\(factorize_convs=True"):
        _trainer([], load_path=checkpoint)


def test_nothing_to_factorize_is_a_no_op_with_a_warning_and_no_composer_keys() -> None:
    logger = InMemoryLogger()
    with pytest.warns(NoEffectWarning, match="leave nothing to factorize"):
        trainer = _trainer([Factorize(factorize_convs=False, factorize_linears=False, **TINY)], loggers=[logger])
    assert not any(isinstance(m, (FactorizedConv2d, FactorizedLinear)) for m in trainer.state.model.modules())
    assert not any(key.startswith("factorize/") for key in logger.hyperparameters)


@pytest.mark.parametrize(("convs", "linears"), [(True, True), (True, False), (False, True)])
def test_composer_keys_come_one_call_per_kind_as_in_composer(convs: bool, linears: bool) -> None:
    class RecordedCalls:  # keeps each log_hyperparameters call apart (InMemoryLogger merges them)
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def log_hyperparameters(self, params: dict) -> None:
            self.calls.append(dict(params))

    logger, model = RecordedCalls(), tiny_image_classifier()
    Factorize(factorize_convs=convs, factorize_linears=linears, **TINY).apply(Event.INIT, State(model=model), logger)
    counts = {
        "factorize/num_conv2d_replacements": sum(isinstance(m, FactorizedConv2d) for m in model.modules()),
        "factorize/num_linear_replacements": sum(isinstance(m, FactorizedLinear) for m in model.modules()),
    }
    wanted = [{key: counts[key]} for key, on in zip(counts, (convs, linears)) if on]
    assert logger.calls[: len(wanted)] == wanted and len(logger.calls) == len(wanted) + 1  # then the report


def test_composer_keys_are_logged_for_each_kind_switched_on() -> None:
    logger = InMemoryLogger()
    trainer = _trainer([Factorize(factorize_linears=False, **TINY)], loggers=[logger])
    convs = sum(isinstance(m, FactorizedConv2d) for m in trainer.state.model.modules())
    assert convs > 0 and logger.hyperparameters["factorize/num_conv2d_replacements"] == convs
    assert "factorize/num_linear_replacements" not in logger.hyperparameters


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"latent_channels": 128.5}, ValueError, "`latent_channels`=128.5 must be a whole number"),
        ({"latent_features": 0}, ValueError, "`latent_features`=0"),
        ({"latent_features": float("inf")}, ValueError, "`latent_features`=inf"),
        ({"min_channels": -8}, ValueError, "`min_channels`=-8"),
        ({"factorize_linears": 1}, TypeError, "`factorize_linears`=1"),
        ({"strict": None}, TypeError, "`strict`=None"),
    ],
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Factorize(**kwargs)
