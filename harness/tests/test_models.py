"""The CIFAR ResNet's GroupNorm and dropout variant: the model on which Gyro Dropout and low-precision
GroupNorm have modules to replace, so that a study can measure them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch import nn

from cadence.algorithm import NotApplicableError
from cadence.ops import NoEffectWarning
from cadence_harness.reading.tables import describe
from cadence_harness.running.models import cifar_resnet
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec
from cadence_harness.store_report import build_report


def _count(network: nn.Module, kind: type[nn.Module]) -> int:
    return sum(isinstance(m, kind) for m in network.modules())


def test_the_default_resnet20_is_unchanged_by_the_new_options() -> None:
    torch.manual_seed(0)
    default = cifar_resnet(20)
    torch.manual_seed(0)
    explicit = cifar_resnet(20, norm="batchnorm", dropout=0.0)
    assert _count(default, nn.BatchNorm2d) == 21 and _count(default, nn.GroupNorm) == 0
    assert _count(default, nn.Dropout) == 0
    assert list(default.state_dict()) == list(explicit.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), explicit.state_dict().values()))


def test_groupnorm_replaces_every_batchnorm_and_dropout_sits_before_the_classifier() -> None:
    network = cifar_resnet(20, norm="groupnorm", groups=8, dropout=0.3)
    norms = [m for m in network.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 21 and _count(network, nn.BatchNorm2d) == 0
    assert {m.num_groups for m in norms} == {8}
    assert isinstance(network[-2], nn.Dropout) and network[-2].p == 0.3 and isinstance(network[-1], nn.Linear)
    assert network(torch.rand(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"norm": "layernorm"}, r"`norm` = 'layernorm': use one of 'batchnorm', 'groupnorm'"),
        ({"norm": "groupnorm", "groups": 6}, r"`groups` = 6 must be a positive divisor of `width` = 16"),
        ({"dropout": 1.0}, r"`dropout` = 1.0 must be in \[0, 1\)"),
    ],
)
def test_bad_options_are_refused_with_the_allowed_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cifar_resnet(20, **kwargs)


def _run(tracking_uri: str, recipe: Any, methods: tuple[str, ...]) -> tuple[Any, list[str]]:
    """Execute one run; return it and the methods that warned `NoEffectWarning` (replaced nothing)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoEffectWarning)
        result = execute(RunSpec(recipe, methods, seed=0), tracking_uri=tracking_uri, progress_bar=False)
    silent = sorted(str(w.message).split(" changed no module")[0] for w in caught if w.category is NoEffectWarning)
    return MlflowClient(tracking_uri).get_run(result.run_id), silent


def test_gyro_dropout_and_low_precision_groupnorm_find_their_modules_on_the_variant(
    tracking_uri: str, tiny_recipe: Any, tmp_path: Path
) -> None:
    variant = {"norm": "groupnorm", "dropout": 0.5}
    gyro = {"gyro_dropout": {"sigma": 4, "tau": 2}}
    recipe = tiny_recipe(model_kwargs=variant, precision="amp_bf16", methods=gyro)
    run, silent = _run(tracking_uri, recipe, ("gyro_dropout", "low_precision_groupnorm"))
    assert silent == [] and run.info.status == "FINISHED"
    assert run.data.params["precision"] == "amp_bf16" and run.data.params["model_kwargs.norm"] == "groupnorm"
    # the stock ResNet-20 has neither module: both are refused before a run exists (no baseline under their name)
    with pytest.raises(NotApplicableError, match="gyro_dropout would change nothing in this model"):
        _run(tracking_uri, tiny_recipe(precision="amp_bf16", methods=gyro), ("gyro_dropout",))
    with pytest.raises(NotApplicableError, match=r"LowPrecisionGroupNorm replaces torch\.nn\.GroupNorm layers"):
        _run(tracking_uri, tiny_recipe(precision="amp_bf16"), ("low_precision_groupnorm",))
    # a report names the variant, so that it never reads as the stock model
    _run(tracking_uri, tiny_recipe(precision="amp_bf16"), ())  # the stock model's baseline beside it
    sections = build_report(["tiny"], tracking_uri=tracking_uri, out_dir=tmp_path, plots=False).sections
    headers = sorted(describe(section.summaries).split(" on ")[0] for section in sections)
    assert headers == ["tv/resnet20", "tv/resnet20 (dropout=0.5, norm=groupnorm)"]
