"""Every pair of installed methods that one model can carry either trains together or is rejected
before training, with a message naming both. The plan follows the declared orders (the list's
order breaks ties) and is the same every time.

Each method is built with arguments that make it act on the test models (a surgery method with its
defaults would leave a tiny network alone with a `NoEffectWarning`, which the suite turns into an
error), so a pair that trains is a pair whose two methods both did their work. Vision and
model-agnostic methods meet on `vision_model` (every vision method finds its layers there) under
bf16 autocast, where the low-precision norms act; text methods meet each other and the
model-agnostic ones on a tiny BERT classifier. A text method on an image network (or the reverse)
is refused up front by the method itself: `tests/test_method_faults.py` covers that.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from cadence import Algorithm, Classifier, Engine, Event, MethodConflictError, State, Trainer
from cadence.engine import DeclaredMethod, check_composition, check_declarations
from cadence.registry import registry
from cadence.testing import image_dataset

NUM_CLASSES = 4


class Residual(nn.Module):
    """A residual block as stochastic depth expects it: act(x + branch(x)), the parts named so."""

    def __init__(self, channels: int):
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        self.shortcut = None
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.branch(x))


def vision_model() -> Classifier:
    """A small CNN holding a layer of every kind a vision method changes: 8- and 16-channel and strided
    convolutions, BatchNorm, a residual block, GroupNorm, LayerNorm, linear layers and dropout."""
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        Residual(8),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.LayerNorm(16), nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, NUM_CLASSES),
    )  # fmt: skip
    return Classifier(module, num_classes=NUM_CLASSES)


def text_model() -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100,
        num_labels=NUM_CLASSES,
    )  # fmt: skip
    from cadence import HuggingFaceModel

    return HuggingFaceModel(transformers.BertForSequenceClassification(config))


def text_dataset(num_samples: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 100, (num_samples, 12), generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (num_samples,), generator=generator)
    return [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": y} for i, y in zip(input_ids, labels)]


def _method(name: str, **kwargs: Any) -> Callable[[], Algorithm]:
    return lambda: registry().method(name).algorithm(**kwargs)


# Methods that work on any model: they meet both families.
AGNOSTIC = {
    "decoupled_weight_decay": _method("decoupled_weight_decay", weight_decay=1e-2),
    "ema": _method("ema", half_life="2ba"),
    "gradient_clipping": _method("gradient_clipping", clipping_type="norm", clipping_threshold=0.1),
    "layer_freezing": _method("layer_freezing", freeze_start=0.0, freeze_level=0.5),
    "low_precision_layernorm": _method("low_precision_layernorm"),
    "sam": _method("sam", rho=0.05),
    "scale_schedule": _method("scale_schedule", ratio=0.5),
    "swa": _method(
        "swa", swa_start="0.3dur", swa_end="0.8dur", update_interval="1ba", schedule_swa_lr=True, swa_lr=0.01
    ),
}
VISION = {
    "augmix": _method("augmix"),
    "blurpool": _method("blurpool", min_channels=8),
    "channels_last": _method("channels_last"),
    "colout": _method("colout"),
    "cutmix": _method("cutmix", alpha=1.0),
    "cutout": _method("cutout", num_holes=2, length=0.25),
    # the 16-channel layers only: SqueezeExcite (after it on INIT) still finds the 8-channel convolutions
    "factorize": _method("factorize", min_channels=16, latent_channels=4, min_features=16, latent_features=4),
    "ghost_batchnorm": _method("ghost_batchnorm", ghost_batch_size=2),
    "gyro_dropout": _method("gyro_dropout", p=0.5, sigma=2, tau=1),
    "label_smoothing": _method("label_smoothing", smoothing=0.1),
    "low_precision_groupnorm": _method("low_precision_groupnorm"),
    "mixup": _method("mixup", alpha=0.4),
    "progressive_resizing": _method("progressive_resizing"),
    "randaugment": _method("randaugment"),
    "selective_backprop": _method("selective_backprop", start=0.0, end=1.0, keep=0.5, scale_factor=0.5, interrupt=0),
    "squeeze_excite": _method("squeeze_excite", latent_channels=0.5, min_channels=8),
    "stochastic_depth": _method("stochastic_depth", target_layer_name=Residual, drop_rate=0.5),
    "weight_standardization": _method("weight_standardization"),
}
TEXT = {
    "alibi": _method("alibi", max_sequence_length=64, train_sequence_length_scaling=1.0),
    "gated_linear_units": _method("gated_linear_units"),
    "seq_length_warmup": _method("seq_length_warmup", duration=1.0, min_seq_length=4, max_seq_length=12, step_size=4),
}
VISION_PAIRS = list(itertools.combinations(sorted({**VISION, **AGNOSTIC}), 2))
TEXT_PAIRS = [pair for pair in itertools.combinations(sorted({**TEXT, **AGNOSTIC}), 2) if set(pair) & set(TEXT)]


def _trainer(algorithms: list[Algorithm], *, text: bool) -> Trainer:
    torch.manual_seed(0)
    model = text_model() if text else vision_model()
    dataset = text_dataset(8) if text else image_dataset(8, num_classes=NUM_CLASSES)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4, shuffle=True),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=algorithms,
        precision="amp_bf16",
        seed=0,
        device="cpu",
        progress_bar=False,
    )


def _trains_or_is_rejected_up_front(names: tuple[str, ...], *, text: bool) -> None:
    factories = {**AGNOSTIC, **VISION, **TEXT}
    algorithms = [factories[name]() for name in names]
    try:
        trainer = _trainer(algorithms, text=text)
    except MethodConflictError as error:
        a, b = (type(x).__name__ for x in algorithms)
        assert a in str(error) and b in str(error) and "Fix:" in str(error)
        return
    trainer.fit()


def test_every_installed_method_is_in_a_family() -> None:
    """A new method package joins one family here, with arguments that make it act on that family's model."""
    unplaced = sorted(set(registry().methods) - {*AGNOSTIC, *VISION, *TEXT})
    assert not unplaced, f"add {unplaced} to AGNOSTIC, VISION or TEXT in tests/test_composition.py"


def _installed(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [pair for pair in pairs if set(pair) <= set(registry().methods)]


@pytest.mark.parametrize(
    ("first", "second"), _installed(VISION_PAIRS), ids=[f"{a}+{b}" for a, b in _installed(VISION_PAIRS)]
)
def test_vision_pair_trains_or_is_rejected_up_front(first: str, second: str) -> None:
    _trains_or_is_rejected_up_front((first, second), text=False)


@pytest.mark.parametrize(
    ("first", "second"), _installed(TEXT_PAIRS), ids=[f"{a}+{b}" for a, b in _installed(TEXT_PAIRS)]
)
def test_text_pair_trains_or_is_rejected_up_front(first: str, second: str) -> None:
    _trains_or_is_rejected_up_front((first, second), text=True)


def _compatible_vision_methods() -> list[Algorithm]:
    """The installed vision and model-agnostic methods in name order, leaving out each one whose declared
    conflict with an earlier one would make the engine refuse the run (EMA's with SWA, for instance)."""
    chosen: list[Algorithm] = []
    for name, factory in sorted({**VISION, **AGNOSTIC}.items()):
        if name not in registry().methods:
            continue
        try:
            check_composition([*chosen, factory()])
        except MethodConflictError:
            continue
        chosen.append(factory())
    return chosen


def test_all_compatible_vision_methods_train_together() -> None:
    algorithms = _compatible_vision_methods()
    assert len(algorithms) >= len({**VISION, **AGNOSTIC}) - 3, [type(a).__name__ for a in algorithms]
    trainer = _trainer(algorithms, text=False)
    trainer.fit()
    assert trainer.state.timestamp.batch >= 1


def test_plan_is_deterministic_and_follows_declared_orders() -> None:
    engine = Engine(State(model=vision_model()), algorithms=_compatible_vision_methods())
    for event in ("after_dataloader", "before_forward", "before_loss"):
        orders = [type(a).order for a in engine.plan(event)]
        expected = sorted(orders, reverse=event.startswith("after_"))
        assert orders == expected, f"{event}: methods must run by declared order, got {orders}"
    again = Engine(State(model=vision_model()), algorithms=_compatible_vision_methods())
    assert engine.describe() == again.describe()


def _order_ties(factories: dict[str, Callable[[], Algorithm]]) -> list[str]:
    """Pairs of `factories`' methods the engine accepts together that act at one event other than INIT, where one
    changes what the other reads or changes, with one declared order."""
    ties = []
    for first, second in itertools.combinations(sorted(n for n in factories if n in registry().methods), 2):
        a, b = factories[first](), factories[second]()
        try:
            check_composition([a, b])
        except MethodConflictError:
            continue
        shared = (set(getattr(type(a), "events", ())) & set(getattr(type(b), "events", ()))) - {Event.INIT}
        ea, eb = a.effects(), b.effects()
        touched = (set(ea.writes) & (set(eb.writes) | set(eb.reads))) | (set(eb.writes) & set(ea.reads))
        if shared and touched and type(a).order == type(b).order:
            ties.append(f"{first} and {second} (order {type(a).order} at {sorted(e.value for e in shared)})")
    return ties


def test_methods_that_change_the_same_thing_at_one_event_have_distinct_orders() -> None:
    """The engine sorts by declared order and keeps the `algorithms` list's order for ties, so two methods that
    change the same thing at one event under one order would run, and give results, in the order the list was
    written (AugMix and RandAugment, both augmenting images at AFTER_DATALOADER, did). INIT is left out: the
    surgeries there each declare the whole model, yet replace layer types no other one touches."""
    ties = _order_ties({**VISION, **AGNOSTIC}) + _order_ties({**TEXT, **AGNOSTIC})
    assert not ties, f"give each a distinct `order`: {'; '.join(ties)}"


def test_augmix_and_randaugment_give_the_same_run_in_either_list_order() -> None:
    if not {"augmix", "randaugment"} <= set(registry().methods):
        pytest.skip("augmix or randaugment is not installed")
    models = []
    for names in (("augmix", "randaugment"), ("randaugment", "augmix")):
        trainer = _trainer([VISION[name]() for name in names], text=False)
        trainer.fit()
        models.append(dict(trainer.state.model.named_parameters()))
    for name, parameter in models[0].items():
        assert torch.equal(parameter, models[1][name]), name


def _refusal(check: Callable[[list[Any]], None], methods: list[Any]) -> str | None:
    try:
        check(methods)
    except MethodConflictError as error:
        return str(error)
    return None


def test_installed_methods_logged_as_declarations_are_refused_as_the_methods_are() -> None:
    """A run logs what its methods declare (`DeclaredMethod.to_dict`) and the recipe search checks those records
    without the classes (`check_declarations`): every pair of installed methods, and each one twice, gets the same
    verdict and the same message either way."""
    factories = {name: f for name, f in {**VISION, **AGNOSTIC, **TEXT}.items() if name in registry().methods}
    refused = 0
    for first, second in itertools.combinations_with_replacement(sorted(factories), 2):
        methods = [factories[first](), factories[second]()]
        logged = [DeclaredMethod.from_dict(json.loads(json.dumps(DeclaredMethod.of(m).to_dict()))) for m in methods]
        expected = _refusal(check_composition, methods)
        assert _refusal(check_declarations, logged) == expected, (first, second)
        refused += expected is not None
    assert refused >= 3  # EMA with SWA, SAM twice, MixUp twice at least
