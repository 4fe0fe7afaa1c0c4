"""GatedLinearUnits meets the contract every cadence method meets, on tiny HuggingFace models with dict batches.

`MethodConformance` builds an image model and image batches by default; text methods override
`make_model` and `make_dataset` (a list of dict samples: the DataLoader collates them into dict batches).
"""

from __future__ import annotations

import pytest
import torch
from cadence_gated_linear_units import GatedLinearUnits

import cadence
from cadence.testing import MethodConformance

transformers = pytest.importorskip("transformers")


def token_samples(num_samples: int, seed: int, classes: int | None = None, length: int = 12) -> list[dict]:
    """Random token sequences; labels are one class per sequence, or the tokens (language modelling)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 100, (num_samples, length), generator=generator)
    labels = input_ids if classes is None else torch.randint(0, classes, (num_samples,), generator=generator)
    return [
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": label}
        for ids, label in zip(input_ids, labels)
    ]


class TestGatedLinearUnitsConformance(MethodConformance):
    """A BERT sequence classifier (Composer's setting)."""

    def make_model(self) -> cadence.HuggingFaceModel:
        config = transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100,
            num_labels=self.num_classes,
        )  # fmt: skip
        return cadence.HuggingFaceModel(transformers.BertForSequenceClassification(config))

    def make_dataset(self, num_samples: int, seed: int = 0) -> list[dict]:  # type: ignore[override]
        return token_samples(num_samples, seed, classes=self.num_classes)

    def make_algorithm(self) -> GatedLinearUnits:
        return GatedLinearUnits()


class TestGatedLinearUnitsOnGPT2Conformance(TestGatedLinearUnitsConformance):
    """A GPT-2 language model (beyond Composer), with biases and a given activation."""

    def make_model(self) -> cadence.HuggingFaceModel:
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0)
        return cadence.HuggingFaceModel(transformers.GPT2LMHeadModel(config))

    def make_dataset(self, num_samples: int, seed: int = 0) -> list[dict]:  # type: ignore[override]
        return token_samples(num_samples, seed)

    def make_algorithm(self) -> GatedLinearUnits:
        return GatedLinearUnits(act_fn=torch.nn.GELU(), gated_layer_bias=True, non_gated_layer_bias=True)
