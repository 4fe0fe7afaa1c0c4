"""LowPrecisionLayerNorm adapter: its event, the run's precision, ordering after GLU, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cadence_low_precision_layernorm import LowPrecisionLayerNorm, LPLayerNorm
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import cadence
from cadence import Classifier, Event, InMemoryLogger, Resource, State, Trainer
from cadence.ops import NoEffectWarning, SurgeryMethod, SurgeryReport, replace_modules

transformers = pytest.importorskip("transformers")


def _net() -> Classifier:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3))
    return Classifier(module, num_classes=3)


def _trainer(algorithms: list, model: nn.Module | None = None, loader: object = None, **kwargs) -> Trainer:
    model = model if model is not None else _net()
    if loader is None:
        data = torch.Generator().manual_seed(1)
        dataset = TensorDataset(torch.rand(16, 12, generator=data), torch.randint(0, 3, (16,), generator=data))
        loader = DataLoader(dataset, batch_size=4)
    kwargs.setdefault("precision", "amp_bf16")
    return Trainer(
        model=model,
        train_dataloader=loader,
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=algorithms,
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _exact_layernorms(model: nn.Module) -> int:
    return sum(type(m) is nn.LayerNorm for m in model.modules())


@pytest.mark.parametrize("apply_at", ["init", "before_load", "after_load", Event.AFTER_LOAD])
def test_matches_only_its_apply_at_event(apply_at: str | Event) -> None:
    algorithm, state = LowPrecisionLayerNorm(apply_at), State(model=_net(), max_duration="1ba")
    assert [e for e in Event if algorithm.match(e, state)] == [Event(apply_at)]
    assert algorithm.apply_at == Event(apply_at).value  # a plain string: checkpoints load with weights_only


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"apply_at": "fit_start"}, "`apply_at`='fit_start'"), ({"apply_at": Event.BATCH_END}, "`apply_at`='batch_end'"),
     ({"strict": 1}, "`strict`=1")],
)  # fmt: skip
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LowPrecisionLayerNorm(**kwargs)


def test_declarations() -> None:
    algorithm = LowPrecisionLayerNorm()
    assert repr(algorithm) == "LowPrecisionLayerNorm(apply_at='init', strict=False)"
    assert algorithm.required_on_load() and algorithm.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}


class _Texts(Dataset):
    """Dict samples as a tokenizer's collate would give them."""

    def __init__(self, n: int = 8, length: int = 12):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, 100, (n, length), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


def test_in_a_bf16_run_every_layernorm_of_an_hf_model_runs_in_bf16() -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    model = cadence.HuggingFaceModel(transformers.BertForSequenceClassification(config))
    logger = InMemoryLogger()
    trainer = _trainer([LowPrecisionLayerNorm()], model, DataLoader(_Texts(), batch_size=4), loggers=[logger])
    assert _exact_layernorms(model) == 0 and sum(isinstance(m, LPLayerNorm) for m in model.modules()) == 5
    assert logger.hyperparameters["LowPrecisionLayerNorm/LayerNorm to LPLayerNorm"] == 5
    dtypes = set()
    for module in model.modules():
        if isinstance(module, LPLayerNorm):
            module.register_forward_hook(lambda module, args, out: dtypes.add(out.dtype))
    trainer.fit()
    assert dtypes == {torch.bfloat16}
    assert all(torch.isfinite(torch.tensor(logger.steps_and_values("loss/train/total")[1])))


def test_in_an_fp32_run_it_changes_nothing_and_warns() -> None:
    with pytest.warns(NoEffectWarning, match="precision='fp32'"):
        trainer = _trainer([LowPrecisionLayerNorm()], precision="fp32")
    assert _exact_layernorms(trainer.state.model) == 1 and not trainer.state.algorithms[0].report


class _AddLayerNorms(SurgeryMethod):
    """Stands in for GatedLinearUnits (order -20): a surgery that creates LayerNorms."""

    order = -20

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        policy = {nn.Linear: lambda m, path: nn.Sequential(m, nn.LayerNorm(m.out_features))}
        return replace_modules(model, policy, optimizers=optimizers, method=self.name)


def test_runs_after_surgeries_that_create_layernorms_whatever_the_list_order() -> None:
    trainer = _trainer([LowPrecisionLayerNorm(), _AddLayerNorms()])
    assert [a.name for a in trainer.engine.plan(Event.INIT)] == ["_AddLayerNorms", "LowPrecisionLayerNorm"]
    model = trainer.state.model
    assert _exact_layernorms(model) == 0 and sum(isinstance(m, LPLayerNorm) for m in model.modules()) == 3
    trainer.fit()


def test_a_checkpoint_after_surgery_needs_the_same_surgery(tmp_path: Path) -> None:
    trained = _trainer([LowPrecisionLayerNorm()], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep1-ba4.pt"
    resumed = _trainer([LowPrecisionLayerNorm()], load_path=checkpoint)
    x = torch.rand(3, 12)
    for model in (trained.state.model, resumed.state.model):
        model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    with pytest.raises(cadence.CheckpointMismatchError, match=r"LowPrecisionLayerNorm\(apply_at='init'"):
        _trainer([], load_path=checkpoint)
    with pytest.raises(cadence.CheckpointMismatchError, match="apply_at='after_load'"):
        _trainer([LowPrecisionLayerNorm("after_load")], load_path=checkpoint)
