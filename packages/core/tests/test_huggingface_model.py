"""`HuggingFaceModel` on tiny config-built BERT and GPT-2 models (no hub access)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cadence import Trainer
from cadence.models import HuggingFaceModel
from cadence.models.huggingface import LanguageCrossEntropy, LanguagePerplexity

transformers = pytest.importorskip("transformers")

VOCAB = 50


def tiny_bert(num_labels: int = 3) -> torch.nn.Module:
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=num_labels,
    )
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


def tiny_gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def classification_batch(n: int = 4, length: int = 8) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {
        "input_ids": torch.randint(0, VOCAB, (n, length), generator=generator),
        "attention_mask": torch.ones(n, length, dtype=torch.long),
        "labels": torch.randint(0, 3, (n,), generator=generator),
        "idx": torch.arange(n),  # not a forward argument: must be filtered out
    }


def lm_batch(n: int = 3, length: int = 10) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (n, length), generator=torch.Generator().manual_seed(2))
    labels = ids.clone()
    labels[0, -3:] = -100  # padding
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def test_classification_filters_the_batch_and_never_mutates_it() -> None:
    model = HuggingFaceModel(tiny_bert())
    batch = classification_batch()
    before = dict(batch)
    outputs = model(batch)
    loss = model.loss(outputs, batch)
    assert batch.keys() == before.keys() and all(batch[k] is before[k] for k in before)
    expected = F.cross_entropy(outputs.logits, batch["labels"])
    assert torch.allclose(loss, expected, atol=1e-6)
    assert "idx" not in model.model_inputs(batch) and "labels" in model.model_inputs(batch)
    assert not model.shift_labels


def test_classification_metrics_default_to_accuracy_and_score_the_logits() -> None:
    model = HuggingFaceModel(tiny_bert())
    metrics = model.get_metrics(is_train=False)
    assert list(metrics) == ["MulticlassAccuracy"]
    batch = classification_batch()
    outputs = model.eval_forward(batch)
    model.update_metric(batch, outputs, metrics["MulticlassAccuracy"])
    expected = (outputs.logits.argmax(-1) == batch["labels"]).float().mean()
    assert torch.isclose(metrics["MulticlassAccuracy"].compute(), expected)
    assert "labels" in batch


def test_use_logits_returns_the_logits_tensor() -> None:
    model = HuggingFaceModel(tiny_bert(), use_logits=True)
    batch = classification_batch()
    logits = model.eval_forward(batch)
    assert isinstance(logits, torch.Tensor) and logits.shape == (4, 3)
    metric = model.get_metrics()["MulticlassAccuracy"]
    model.update_metric(batch, logits, metric)
    assert 0.0 <= float(metric.compute()) <= 1.0


def test_causal_lm_shifts_labels_and_matches_the_models_own_loss() -> None:
    model = HuggingFaceModel(tiny_gpt2())
    assert model.shift_labels
    metrics = model.get_metrics(is_train=False)
    assert set(metrics) == {"LanguageCrossEntropy", "LanguagePerplexity"}
    batch = lm_batch()
    with torch.no_grad():
        outputs = model.eval_forward(batch)
    for metric in metrics.values():
        model.update_metric(batch, outputs, metric)
    # GPT-2 computes its loss on shifted labels, averaged over non-ignored tokens: the metric must agree.
    assert math.isclose(float(metrics["LanguageCrossEntropy"].compute()), float(outputs.loss), rel_tol=1e-5)
    assert math.isclose(float(metrics["LanguagePerplexity"].compute()), math.exp(float(outputs.loss)), rel_tol=1e-5)


def test_token_accuracy_of_a_causal_lm_scores_each_next_token() -> None:
    from torchmetrics.classification import MulticlassAccuracy

    model = HuggingFaceModel(
        tiny_gpt2(), eval_metrics={"acc": MulticlassAccuracy(VOCAB, average="micro", ignore_index=-100)}
    )
    batch = lm_batch()
    with torch.no_grad():
        outputs = model.eval_forward(batch)
    metric = model.get_metrics(is_train=False)["acc"]
    model.update_metric(batch, outputs, metric)
    predicted, target = outputs.logits[:, :-1].argmax(-1), batch["labels"][:, 1:]
    kept = target != -100
    expected = (predicted[kept] == target[kept]).double().mean()
    assert kept.sum() > 0 and math.isclose(float(metric.compute()), float(expected), rel_tol=1e-6)


def test_language_cross_entropy_weights_batches_by_tokens() -> None:
    metric = LanguageCrossEntropy()
    logits_a, target_a = torch.randn(1, 4, 5), torch.tensor([[1, 2, -100, -100]])
    logits_b, target_b = torch.randn(1, 4, 5), torch.tensor([[0, 1, 2, 3]])
    metric.update(logits_a, target_a)
    metric.update(logits_b, target_b)
    all_logits = torch.cat([logits_a, logits_b]).reshape(-1, 5)
    expected = F.cross_entropy(all_logits, torch.cat([target_a, target_b]).reshape(-1), ignore_index=-100)
    assert torch.isclose(metric.compute(), expected, atol=1e-6)
    assert isinstance(LanguagePerplexity(), LanguageCrossEntropy)


def test_explicit_metrics_and_shift_labels_override_the_defaults() -> None:
    from torchmetrics.classification import MulticlassAccuracy

    model = HuggingFaceModel(tiny_bert(), metrics=[MulticlassAccuracy(num_classes=3)], shift_labels=False)
    assert list(model.get_metrics(is_train=True)) == ["MulticlassAccuracy"]
    forced = HuggingFaceModel(tiny_gpt2(), shift_labels=False)
    assert not forced.shift_labels


def test_rejects_non_dict_batches_and_missing_labels() -> None:
    model = HuggingFaceModel(tiny_bert())
    with pytest.raises(TypeError, match="dict batches"):
        model((torch.zeros(2, 4, dtype=torch.long), torch.zeros(2)))
    batch = classification_batch()
    del batch["labels"]
    with pytest.raises(ValueError, match="labels"):
        model.loss(model(batch), batch)


def test_trains_two_steps_with_the_trainer() -> None:
    model = HuggingFaceModel(tiny_bert())
    batches = [classification_batch(), classification_batch()]
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        eval_dataloader=batches[:1],
        max_duration="2ba",
        optimizers=torch.optim.AdamW(model.parameters(), lr=1e-3),
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    assert trainer.state.timestamp.batch == 2
    assert trainer.state.timestamp.token == 2 * 4 * 8
    assert 0.0 <= trainer.eval()["MulticlassAccuracy"] <= 1.0
    trainer.close()


def test_import_cadence_does_not_import_the_wrapper() -> None:
    code = "import sys, cadence; print('cadence.models.huggingface' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
