"""What the `GatedLinearUnits` adapter adds: declarations, its place before Low-Precision LayerNorm,
refusals before training, and checkpoints that record the surgery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cadence_gated_linear_units import BERTGatedFFOutput, GatedLinearUnits
from torch import nn
from torch.utils.data import DataLoader

import cadence
from cadence import Event, NotApplicableError, Resource, Trainer
from cadence.ops import SurgeryMethod, SurgeryReport, replace_modules
from cadence.testing import tiny_image_classifier

transformers = pytest.importorskip("transformers")


def bert() -> cadence.HuggingFaceModel:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    return cadence.HuggingFaceModel(transformers.BertForSequenceClassification(config))


def samples(num_samples: int = 8, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (num_samples, 12), generator=generator)
    labels = torch.randint(0, 2, (num_samples,), generator=generator)
    return [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": y} for i, y in zip(ids, labels)]


def trainer(algorithms: list, **kwargs: Any) -> Trainer:
    model = bert()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(samples(), batch_size=4),
        max_duration="2ba",
        optimizers=torch.optim.AdamW(model.parameters(), lr=1e-3),
        algorithms=algorithms,
        device="cpu",
        progress_bar=False,
        seed=0,
        **kwargs,
    )


def test_declarations() -> None:
    glu = GatedLinearUnits()
    assert glu.events == (Event.INIT,) and GatedLinearUnits.order == -20 and glu.required_on_load()
    assert glu.effects().writes == {Resource.MODEL, Resource.OPTIMIZER}
    assert (
        repr(glu) == "GatedLinearUnits(act_fn=None, gated_layer_bias=False, non_gated_layer_bias=False, strict=False)"
    )
    # a function is recorded by name: its repr holds an address that differs in the process that resumes
    assert GatedLinearUnits(act_fn=F.silu).hparams()["act_fn"] == "torch.nn.functional.silu"


class MarkedLayerNorm(nn.LayerNorm):
    """What a low-precision LayerNorm would put in place; it keeps the weights."""


class ConvertLayerNorms(SurgeryMethod):
    """Stands in for Low-Precision LayerNorm (order 50): replaces every nn.LayerNorm on INIT."""

    order = 50

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        self.saw_gated_blocks = any(isinstance(m, BERTGatedFFOutput) for m in model.modules())

        def convert(norm: nn.Module, path: str) -> nn.Module:
            new = MarkedLayerNorm(norm.normalized_shape, norm.eps)
            new.load_state_dict(norm.state_dict())
            return new

        return replace_modules(model, {nn.LayerNorm: convert}, optimizers=optimizers, method=self.name)


def test_it_runs_before_low_precision_layernorm_whatever_the_list_order() -> None:
    converter = ConvertLayerNorms()
    run = trainer([converter, GatedLinearUnits()])  # listed after, run first on INIT (-20 < 50)
    assert converter.saw_gated_blocks
    norms = [m for m in run.state.model.modules() if isinstance(m, nn.LayerNorm)]
    assert norms and all(isinstance(m, MarkedLayerNorm) for m in norms)  # those in the gated blocks included
    run.fit()


def test_models_without_a_known_feed_forward_block_are_refused_before_training() -> None:
    batch = next(iter(DataLoader(samples(2), batch_size=2)))
    with pytest.raises(NotApplicableError, match="GatedLinearUnits does not apply: Classifier has no feed-forward"):
        GatedLinearUnits().check_applicable(tiny_image_classifier(), batch)
    run = trainer([GatedLinearUnits()])  # after the surgery (the trainer asks on the first batch) it still applies
    GatedLinearUnits().check_applicable(run.state.model, batch)


def test_a_checkpoint_after_glu_loads_into_a_fresh_model_with_the_same_method_and_nowhere_else(tmp_path: Path) -> None:
    trained = trainer([GatedLinearUnits()], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep1-ba2.pt"
    resumed = trainer([GatedLinearUnits()], load_path=checkpoint)
    batch = {key: torch.stack([s[key] for s in samples(3, seed=4)]) for key in ("input_ids", "attention_mask")}
    for run in (trained, resumed):
        run.state.model.eval()
    with torch.no_grad():
        assert torch.equal(trained.state.model(batch).logits, resumed.state.model(batch).logits)
    with pytest.raises(cadence.CheckpointMismatchError, match=r"written after GatedLinearUnits\(act_fn=None"):
        trainer([], load_path=checkpoint)
