"""`[optimizer]` choices: torch's, and the decoupled-weight-decay optimizers when their package is installed."""

from __future__ import annotations

from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from cadence.registry import registry
from cadence_harness.running.recipe import OPTIMIZERS, RecipeError
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec


@pytest.fixture
def decoupled() -> None:
    if "DecoupledSGDW" not in registry().functions:
        pytest.skip("needs cadence-decoupled-weight-decay")


def test_the_decoupled_optimizers_are_choices_when_installed(decoupled: None) -> None:
    assert OPTIMIZERS["decoupled_sgdw"] is registry().functions["DecoupledSGDW"]
    assert OPTIMIZERS["decoupled_adamw"] is registry().functions["DecoupledAdamW"]
    assert {"sgd", "adam", "adamw", "decoupled_sgdw", "decoupled_adamw"} == set(OPTIMIZERS)


def test_their_arguments_are_checked_against_their_signature(decoupled: None, tiny_recipe: Any) -> None:
    recipe = tiny_recipe(optimizer={"name": "decoupled_adamw", "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 1e-2})
    assert recipe.optimizer["name"] == "decoupled_adamw"
    with pytest.raises(RecipeError, match=r"unknown key `optimizer.nesterov`: DecoupledAdamW takes no 'nesterov'"):
        tiny_recipe(optimizer={"name": "decoupled_adamw", "lr": 1e-3, "nesterov": True})
    with pytest.raises(RecipeError, match=r"optimizer.name.*decoupled_sgdw"):
        tiny_recipe(optimizer={"name": "decoupled_sgd", "lr": 0.1})  # the message suggests the close match


def test_a_run_trains_with_decoupled_sgdw(decoupled: None, tiny_recipe: Any, tracking_uri: str) -> None:
    optimizer = {"name": "decoupled_sgdw", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    spec = RunSpec(tiny_recipe(optimizer=optimizer), (), seed=0)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    run = MlflowClient(tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert "decoupled_sgdw" in run.data.params.values()


@pytest.fixture
def decoupled_method() -> None:
    if "decoupled_weight_decay" not in registry().methods:
        pytest.skip("needs cadence-decoupled-weight-decay")


def test_the_decoupled_weight_decay_arm_takes_the_optimizers_decay_over(
    decoupled_method: None, tiny_recipe: Any, tracking_uri: str
) -> None:
    # the recipe's SGD decays; DecoupledWeightDecay refuses such an optimizer, so its arm builds the SGD
    # without decay (and logs it so), while the baseline keeps it and both stay one family
    optimizer = {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    recipe = tiny_recipe(optimizer=optimizer, methods={"decoupled_weight_decay": {"weight_decay": 5e-4}})
    arm, baseline = RunSpec(recipe, ("decoupled_weight_decay",), seed=0), RunSpec(recipe, (), seed=0)
    assert arm.optimizer_settings() == {**optimizer, "weight_decay": 0.0}
    assert baseline.optimizer_settings() == optimizer
    assert (arm.family_hash, arm.baseline_curve_hash) == (baseline.family_hash, baseline.curve_hash)
    run = MlflowClient(tracking_uri).get_run(execute(arm, tracking_uri=tracking_uri, progress_bar=False).run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["optimizer.weight_decay"] == "0.0"
    assert run.data.params["method.decoupled_weight_decay.weight_decay"] == "0.0005"
