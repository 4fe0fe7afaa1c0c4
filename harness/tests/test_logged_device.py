"""A run logs its device once, in one spelling: the recipe's `device` (logged by the harness) and the trainer's own
`device` param agree. Issue 27: every GPU run warned "param 'device' is already 'gpu' ...; the new value 'cuda' is
not logged", because the trainer logged `str(torch.device)`."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from mlflow.tracking import MlflowClient

from cadence.loggers.logger import run_hyperparameters
from cadence.state import State
from cadence_harness.running.run import execute, params_of
from cadence_harness.running.runspec import RunSpec
from cadence_mlflow import MLFlowLogger, MLflowLoggerWarning


def _logger_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, MLflowLoggerWarning)]


def test_a_cpu_run_logs_its_device_once_without_a_warning(tracking_uri: str, tiny_recipe: Any) -> None:
    spec = RunSpec(tiny_recipe(device="cpu"), (), seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    assert _logger_warnings(caught) == []
    assert MlflowClient(tracking_uri).get_run(result.run_id).data.params["device"] == "cpu"


def test_a_gpu_run_logs_the_recipes_device_and_the_trainers_as_one_value(tracking_uri: str, tiny_recipe: Any) -> None:
    """What `execute` logs for a GPU recipe, then what the trainer logs at FIT_START for a CUDA state (a
    `torch.device("cuda")` needs no GPU to exist): no param is logged twice with different values."""
    spec = RunSpec(tiny_recipe(device="gpu"), (), seed=0)
    state = State(torch.nn.Linear(2, 2), device="cuda", precision=spec.recipe.resolved_precision)
    logger = MLFlowLogger(spec.experiment, run_name=spec.run_name, tracking_uri=tracking_uri)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logger.log_hyperparameters(params_of(spec, []))
        logger.log_hyperparameters(run_hyperparameters(state))
    logger.finish()
    assert _logger_warnings(caught) == []
    assert MlflowClient(tracking_uri).get_run(logger.run_id).data.params["device"] == "gpu"
