"""What the `Alibi` adapter adds: its events and declarations, the batch reshape in a run, evaluation at
longer lengths, refusals before training, and checkpoints that record the surgery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from cadence_alibi import Alibi, AlibiAttention
from torch.utils.data import DataLoader

import cadence
from cadence import Callback, Event, NotApplicableError, Resource, Trainer
from cadence.testing import tiny_image_classifier

transformers = pytest.importorskip("transformers")


def lm(positions: int = 16, implementation: str = "sdpa") -> cadence.HuggingFaceModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_embd=32, n_layer=2, n_head=2, n_positions=positions, vocab_size=100, bos_token_id=0, eos_token_id=0,
        attn_implementation=implementation,
    )  # fmt: skip
    return cadence.HuggingFaceModel(transformers.GPT2LMHeadModel(config))


def samples(num_samples: int, length: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(3, 100, (num_samples, length), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": row, "attention_mask": torch.ones_like(row), "labels": row} for row in ids]


class Shapes(Callback):
    """Records the input shapes the model sees in training and in evaluation."""

    def __init__(self) -> None:
        self.train: list[tuple[int, ...]] = []
        self.eval: list[tuple[int, ...]] = []

    def before_forward(self, state: Any, logger: Any) -> None:
        self.train.append(tuple(state.batch["input_ids"].shape))

    def eval_before_forward(self, state: Any, logger: Any) -> None:
        self.eval.append(tuple(state.batch["input_ids"].shape))


def trainer(algorithms: list, model: cadence.HuggingFaceModel | None = None, **kwargs: Any) -> Trainer:
    model = model or lm()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(samples(8, 16), batch_size=4),
        max_duration="2ba",
        optimizers=torch.optim.AdamW(model.parameters(), lr=1e-3),
        algorithms=algorithms,
        device="cpu",
        progress_bar=False,
        seed=0,
        **kwargs,
    )


def test_declarations() -> None:
    alibi = Alibi(max_sequence_length=64)
    assert alibi.events == (Event.INIT, Event.AFTER_DATALOADER) and Alibi.order == 40
    assert alibi.required_on_load()
    assert alibi.effects().writes == {Resource.MODEL, Resource.OPTIMIZER, Resource.INPUTS, Resource.TARGETS}
    assert repr(alibi) == "Alibi(max_sequence_length=64, train_sequence_length_scaling=0.25, strict=False)"


def test_it_trains_on_quarter_length_sequences_and_evaluates_on_2s_and_4s() -> None:
    shapes = Shapes()
    evaluation = [DataLoader(samples(2, length, seed=3), batch_size=2) for length in (32, 64)]
    run = trainer([Alibi(max_sequence_length=64)], callbacks=[shapes])  # the model learned 16 positions
    run.fit()
    assert shapes.train == [(16, 4), (16, 4)]  # (4, 16) batches cut into (16, 4): 4x the rows, 1/4 the length
    assert run.state.timestamp.token == 2 * 4 * 16  # the same tokens; samples count the new rows
    model = run.state.model
    assert sum(isinstance(m, AlibiAttention) for m in model.modules()) == 2
    for loader in evaluation:  # evaluation keeps the full length, 2x and 4x the training length
        metrics = run.eval(eval_dataloader=loader)
        assert metrics and all(torch.isfinite(torch.tensor(value)) for value in metrics.values())
    assert shapes.eval == [(2, 32), (2, 64)]


def test_text_classifiers_and_other_models_are_refused_before_training_with_the_fix() -> None:
    classes = {"input_ids": torch.zeros(4, 16, dtype=torch.long), "labels": torch.zeros(4, dtype=torch.long)}
    with pytest.raises(NotApplicableError, match=r"Alibi does not apply: Classifier has no self-attention"):
        Alibi(64).check_applicable(tiny_image_classifier(), classes)
    with pytest.raises(NotApplicableError, match=r"'labels' is \(4,\).*train_sequence_length_scaling=1.0"):
        Alibi(64).check_applicable(lm(), classes)
    Alibi(64, train_sequence_length_scaling=1.0).check_applicable(lm(), classes)
    with pytest.raises(NotApplicableError, match="got a tuple"):
        Alibi(64).check_applicable(lm(), (torch.zeros(4, 16), torch.zeros(4)))
    flash = lm()
    flash.model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(NotApplicableError, match="GPT2LMHeadModel runs GPT2Attention with attn_implementation="):
        Alibi(64).check_applicable(flash, {"input_ids": torch.zeros(4, 16, dtype=torch.long)})


def test_a_checkpoint_after_alibi_loads_only_into_a_run_with_the_same_alibi(tmp_path: Path) -> None:
    trained = trainer([Alibi(max_sequence_length=64)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    checkpoint = tmp_path / "ep1-ba2.pt"
    assert not any("wpe" in key for key in torch.load(checkpoint, weights_only=True)["model"])
    resumed = trainer([Alibi(max_sequence_length=64)], load_path=checkpoint)
    batch = samples(2, 48, seed=5)  # longer than the 16 learned positions
    inputs = {key: torch.stack([s[key] for s in batch]) for key in batch[0]}
    for run in (trained, resumed):
        run.state.model.eval()
    with torch.no_grad():
        assert torch.equal(trained.state.model(inputs).logits, resumed.state.model(inputs).logits)
    with pytest.raises(cadence.CheckpointMismatchError, match=r"written after Alibi\(max_sequence_length=64\)"):
        trainer([], load_path=checkpoint)
    trainer([Alibi(max_sequence_length=64, train_sequence_length_scaling=0.5)], load_path=checkpoint)  # same model
    with pytest.raises(cadence.CheckpointMismatchError, match=r"this run applies Alibi\(max_sequence_length=32\)"):
        trainer([Alibi(max_sequence_length=32)], load_path=checkpoint)
