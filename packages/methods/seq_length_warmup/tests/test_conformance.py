"""SeqLengthWarmup meets the contract every cadence method meets, on HF text models and dict batches.

`MethodConformance` is built around images; these subclasses give it a tiny BERT classifier (truncating)
and a tiny GPT-2 language model (reshaping) trained on dict batches of right-padded token sequences.
"""

from __future__ import annotations

import pytest
import torch
from cadence_seq_length_warmup import SeqLengthWarmup, set_batch_sequence_length
from torch import nn
from torch.utils.data import Dataset

import cadence
from cadence.testing import MethodConformance

transformers = pytest.importorskip("transformers")

SEQ, VOCAB = 16, 100


class Tokens(Dataset):
    """Right-padded token sequences (pad id 0) with attention masks, as a tokenizer's collate gives them."""

    def __init__(self, num_samples: int, num_classes: int, causal: bool, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(SEQ // 2, SEQ + 1, (num_samples, 1), generator=generator)
        self.mask = (torch.arange(SEQ) < lengths).long()
        self.ids = torch.randint(1, VOCAB, (num_samples, SEQ), generator=generator) * self.mask
        self.labels = self.ids.masked_fill(self.mask == 0, -100) if causal else lengths.flatten() % num_classes

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


class TestSeqLengthWarmupConformance(MethodConformance):
    """Truncating, keeping each row's end of sequence, on sequence classification (labels per sample)."""

    causal = False

    def make_algorithm(self) -> SeqLengthWarmup:
        # 4 -> 16 in steps of 4 over the whole run: every batch of a 2- or 6-batch run has its own length
        return SeqLengthWarmup(duration=1.0, min_seq_length=4, max_seq_length=SEQ, step_size=4,
                               preserve_end_of_sequence=True)  # fmt: skip

    def make_model(self) -> nn.Module:
        config = transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=VOCAB,
            num_labels=self.num_classes,
        )  # fmt: skip
        return cadence.HuggingFaceModel(transformers.BertForSequenceClassification(config))

    def make_dataset(self, num_samples: int, seed: int = 0) -> Dataset:  # type: ignore[override]
        return Tokens(num_samples, self.num_classes, self.causal, seed)

    def test_functional_keeps_dtype_and_device(self) -> None:
        """The image version does not apply: dict batches keep each entry's dtype and device."""
        batch = next(iter(torch.utils.data.DataLoader(self.make_dataset(6), batch_size=6)))
        batch["inputs_embeds"] = torch.randn(6, SEQ, 3, dtype=torch.float64)
        for truncate in (True, False):
            if not truncate:
                batch["labels"] = batch["input_ids"].clone()  # reshaping needs per-token labels
            out = set_batch_sequence_length(batch, 5, truncate)
            for key, value in batch.items():
                assert out[key].dtype == value.dtype and out[key].device == value.device, key


class TestSeqLengthWarmupReshapingConformance(TestSeqLengthWarmupConformance):
    """Reshaping (every token kept) on a causal language model whose labels are its tokens."""

    causal = True

    def make_algorithm(self) -> SeqLengthWarmup:
        return SeqLengthWarmup(duration=1.0, min_seq_length=4, max_seq_length=SEQ, step_size=4, truncate=False)

    def make_model(self) -> nn.Module:
        config = transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=2, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
        )
        return cadence.HuggingFaceModel(transformers.GPT2LMHeadModel(config))
