"""Tokenizers trained on a run's texts: the first training on a machine is saved and every later run loads it, so
runs of one study share their token ids (WordPiece training is not deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadence_harness.running.data import synthetic_text
from cadence_harness.running.text_tokenizers import tokenizer_sha256, trained_tokenizer


@pytest.mark.parametrize(("kind", "specials"), [("bert-tiny", ["[CLS]", "[SEP]"]), ("gpt2", [])])
def test_a_trained_tokenizer_is_saved_once_and_loaded_by_every_later_run(
    kind: str, specials: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path))
    texts = list(synthetic_text(num_train=200, num_test=8).train_text)
    first = trained_tokenizer(kind, texts, 300)
    (saved,) = tmp_path.glob(f"tokenizer-{kind}-300-*.json")
    stamp = saved.stat().st_mtime_ns
    second = trained_tokenizer(kind, texts, 300)
    assert saved.stat().st_mtime_ns == stamp and len(list(tmp_path.iterdir())) == 1  # loaded, not trained again
    assert second.get_vocab() == first.get_vocab() and len(first) <= 300
    sample = texts[:5]
    assert second(sample)["input_ids"] == first(sample)["input_ids"]
    tokens = first.convert_ids_to_tokens(first(sample[0])["input_ids"])
    assert all(special in tokens for special in specials)  # the post-processor survived the round trip
    assert first.pad_token is not None and first.decode(first(sample[0])["input_ids"], skip_special_tokens=True)
    other = trained_tokenizer(kind, texts[:-1], 300)  # other texts: another tokenizer, beside the first
    assert len(list(tmp_path.glob(f"tokenizer-{kind}-300-*.json"))) == 2
    assert tokenizer_sha256(second) == tokenizer_sha256(first) != tokenizer_sha256(trained_tokenizer(kind, texts, 200))
    assert len(tokenizer_sha256(other)) == 16  # what a run logs: which token ids it saw
