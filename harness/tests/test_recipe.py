"""Recipe validation: bad models, methods, hyperparameters and durations are rejected with precise messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadence.engine import DeclaredMethod
from cadence.registry import registry
from cadence_harness.running.recipe import (
    RECIPES_DIR,
    RecipeError,
    apply_overrides,
    load_recipe,
    parse_recipe,
    parse_value,
)

BASE: dict[str, Any] = {"name": "t", "model": "tv/resnet20", "data": "synthetic", "duration": "2ba"}


def rejects(message: str, **changes: Any) -> None:
    with pytest.raises(RecipeError, match=message):
        parse_recipe({**BASE, **changes})


def test_a_minimal_recipe_gets_documented_defaults() -> None:
    recipe = parse_recipe(BASE)
    assert recipe.batch_size == 128 and recipe.seeds == (0,) and recipe.device == "cpu"
    assert recipe.resolved_precision == "fp32"
    assert recipe.optimizer == {"name": "sgd", "lr": 0.1}
    assert parse_recipe({**BASE, "seeds": 3}).seeds == (0, 1, 2)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("resnet20", r"`model` = 'resnet20': write tv/<name>, timm/<name>, hf/<name-or-folder> or cadence/airbench94"),
        ("tv/resnet999", r"torchvision has no classification model 'resnet999'"),
        ("tv/resnet21", r"close matches: .*resnet20"),
        ("timm/not_a_model", r"timm has no model 'not_a_model'"),
        ("hf/no-such-model", r"not a built-in HF model \(bert-tiny, gpt2-tiny, minilm\) nor a local folder"),
        ("hf/bert-tiny", r"`model` = 'hf/bert-tiny' needs text data, but `data` = 'synthetic' is image data"),
    ],
)
def test_unknown_models_are_rejected(model: str, message: str) -> None:
    rejects(message, model=model)


def test_unknown_keys_are_named_with_a_suggestion() -> None:
    rejects(r"unknown recipe key `batchsize`; did you mean 'batch_size'\?", batchsize=4)
    rejects(r"unknown recipe key `lr`; did you mean `optimizer.lr`\?", lr=0.2, optimizer={"lr": 0.1})  # --set lr=
    rejects(r"unknown key `optimizer.lrr`: SGD takes no 'lrr'; did you mean 'lr'\?", optimizer={"lrr": 0.1})
    rejects(r"unknown grid key `grid.arm`", grid={"arm": ["baseline"]})
    with pytest.raises(RecipeError, match=r"the recipe has no `duration`"):
        parse_recipe({k: v for k, v in BASE.items() if k != "duration"})


@pytest.mark.parametrize(
    ("duration", "message"),
    [
        ("10 epochs", r"`duration` = '10 epochs': not a duration \(cannot parse '10 epochs' as a time"),
        ("0ep", r"`duration` = '0ep': must be > 0"),
        ("0.5dur", r"`duration` = '0.5dur': use one of the units ep, ba, sp"),
        ("1.5ep", r"`duration` = '1.5ep': not a duration \(1.5ep: only 'dur' may be fractional"),
        (3.5, r"`duration` = 3.5: not a duration"),
        (
            "2epochs",
            r"not a duration \(cannot parse '2epochs' as a time\); write a number and a unit, e.g. '10ep' or "
            r"'500ba' or '60000sp'$",
        ),  # only units a recipe takes: no '60sec' or '0.5dur'
    ],
)
def test_bad_durations_are_rejected(duration: Any, message: str) -> None:
    rejects(message, duration=duration)


def test_bad_settings_echo_the_value() -> None:
    rejects(r"`batch_size` = 0: must be an int >= 1", batch_size=0)
    rejects(r"`device` = 'tpu': must be one of 'cpu', 'gpu'", device="tpu")
    rejects(r"`seeds` = \[0, 0\]: seeds must be distinct", seeds=[0, 0])
    rejects(r"`optimizer.lr` = -1: must be a number > 0", optimizer={"lr": -1})
    rejects(r"`schedule.name` = 'cosin': must be one of", schedule={"name": "cosin"})
    rejects(r"`target_accuracy` = 94: must be a fraction in \(0, 1\]", target_accuracy=94)
    rejects(r"`grid.arms` = 'each_pair': must be one of", grid={"arms": ["each_pair"]})
    rejects(r"`data` = 'imagenet': unknown dataset", data="imagenet")
    rejects(r"`task` = 'lm': must be one of 'classification', 'causal_lm'", task="lm")


def test_a_language_model_task_needs_a_decoder_model() -> None:
    rejects(
        r"`task` = 'causal_lm' needs a decoder-only language model, but `model` = 'hf/bert-tiny'",
        model="hf/bert-tiny",
        data="sst2",
        task="causal_lm",
    )
    rejects(r"`task` = 'causal_lm' needs a decoder-only language model, but `model` = 'tv/resnet20'", task="causal_lm")


def test_unknown_methods_are_rejected() -> None:
    rejects(r"`methods.mixupp`: no installed method named 'mixupp'", methods={"mixupp": {}})
    rejects(r"`methods.not_a_method`: no installed method", grid={"methods": ["not_a_method"]})
    rejects(r"`methods.nope`: no installed method", grid={"combinations": [["nope"]]})


def test_bad_hyperparameters_are_rejected(image_methods: list[str]) -> None:
    method = image_methods[0]
    algorithm = registry().method(method).algorithm.__name__
    rejects(
        rf"unknown key `methods.{method}.not_a_knob`: {algorithm} takes no 'not_a_knob'",
        methods={method: {"not_a_knob": 1}},
    )
    bad_values = {"label_smoothing": {"smoothing": 1.5}, "mixup": {"alpha": -1.0}, "cutout": {"num_holes": -2}}
    for name, kwargs in bad_values.items():
        if name in registry().methods:
            rejects(rf"`methods.{name}` = .*: bad hyperparameters: ", methods={name: kwargs})


# Methods for text models only, which the shipped image recipes exclude too: alibi needs `max_sequence_length`,
# the others find nothing to change in an image model.
TEXT_ONLY = ["alibi", "seq_length_warmup", "gated_linear_units", "low_precision_layernorm"]


def test_installed_expands_to_every_installed_method_minus_exclude(image_methods: list[str]) -> None:
    excluded = [*TEXT_ONLY, image_methods[0]]
    recipe = parse_recipe({**BASE, "grid": {"arms": ["each"], "methods": "installed", "exclude": excluded}})
    assert recipe.grid_methods == [m for m in sorted(registry().methods) if m not in excluded]
    assert image_methods[0] not in recipe.grid_methods and image_methods[1] in recipe.grid_methods
    rejects(r"`grid.exclude` .* only applies with methods = \"installed\"", grid={"methods": [], "exclude": ["x"]})


def test_overrides_reach_tables_and_method_hyperparameters() -> None:
    values = apply_overrides(
        BASE, {"batch_size": 8, "optimizer.lr": 0.2, "mixup.alpha": 0.4, "methods.cutout.length": 0.3}
    )
    assert values["batch_size"] == 8 and values["optimizer"] == {"lr": 0.2}
    assert values["methods"] == {"mixup": {"alpha": 0.4}, "cutout": {"length": 0.3}}
    assert parse_value("0.4") == 0.4 and parse_value("true") is True and parse_value("[1, 2]") == [1, 2]
    assert parse_value("tv/resnet20") == "tv/resnet20"


@pytest.mark.parametrize("path", sorted(RECIPES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_is_valid(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.name == path.stem and len(recipe.seeds) >= 3


def test_a_recipe_file_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(RecipeError, match=r"cannot parse recipe .*bad\.toml"):
        load_recipe(bad)
    with pytest.raises(RecipeError, match=r"is not a file nor a shipped recipe; shipped: .*cifar10_resnet20"):
        load_recipe("no_such_recipe")


def test_tiny_recipe_is_valid(tiny_recipe: Any) -> None:
    assert tiny_recipe().batch_size == 4


def test_a_variant_is_a_method_at_other_hyperparameters_with_an_arm_of_its_own() -> None:
    from cadence_harness.running.plan import expand
    from cadence_harness.running.run import build_algorithms, params_of

    values = {
        **BASE,
        "methods": {"mixup": {"alpha": 0.2, "interpolate_loss": True}, "MixUp@claimed": {"alpha": 1.0}},
        "grid": {"arms": ["baseline", "each"]},
    }
    recipe = parse_recipe(values)
    assert recipe.methods["mixup@claimed"] == {"alpha": 1.0, "interpolate_loss": True}  # from mixup's table
    specs = expand(recipe)
    assert [s.arm_name for s in specs] == ["baseline", "mixup", "mixup@claimed"]
    plain, variant = specs[1], specs[2]
    assert variant.run_name == "mixup@claimed-s0" and variant.config_hash != plain.config_hash
    assert variant.group_hash != plain.group_hash and variant.family_hash == plain.family_hash
    (algorithm,) = build_algorithms(variant)
    assert type(algorithm).__name__ == "MixUp" and algorithm.alpha == 1.0
    params = params_of(variant, [algorithm])
    assert params["methods"] == "mixup@claimed" and params["method.mixup.alpha"] == 1.0  # the method's own keys
    declared = DeclaredMethod.from_dict(json.loads(params["effects.mixup"]))  # what this instance declares
    assert declared == DeclaredMethod.of(algorithm) and declared.name == "MixUp" and declared.effects.exclusive
    installed = parse_recipe({**values, "grid": {"arms": ["each"], "methods": "installed", "exclude": TEXT_ONLY}})
    assert "mixup@claimed" in installed.grid_methods  # a variant of an installed method joins "each"
    rejects(
        r"`grid.combinations` = .* lists 'mixup' twice",
        **{**values, "grid": {"combinations": [["mixup", "mixup@claimed"]]}},
    )
    rejects(r"`methods.mixup@no.dots` .* a variant is named method@label", methods={"mixup@no.dots": {}})
    rejects(r"`methods.nope@x`: no installed method named 'nope'", methods={"nope@x": {}})


def test_compile_is_true_false_or_a_torch_compile_mode() -> None:
    from cadence_harness.running.run import compile_config

    assert parse_recipe({**BASE, "compile": "reduce-overhead"}).compile == "reduce-overhead"
    assert parse_recipe({**BASE, "compile": parse_value("reduce-overhead")}).compile == "reduce-overhead"  # --set
    rejects(
        r"`compile` = 'fast': must be true, false or a torch.compile mode: default, reduce-overhead", compile="fast"
    )
    rejects(r"`compile` = 1: must be true, false or a torch.compile mode", compile=1)
    assert [compile_config(mode) for mode in (False, True, "reduce-overhead")] == [
        None,
        {},
        {"mode": "reduce-overhead"},
    ]
