"""Tokenizers trained on a run's texts: the first training on a machine is saved and every later run loads it, so
runs of one study share their token ids (WordPiece training is not deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadence_harness.running import data, text_tokenizers
from cadence_harness.running.data import synthetic_text
from cadence_harness.running.text_tokenizers import (
    ShippedTokenizerError,
    ship_tokenizer,
    shipped_path,
    tokenizer_sha256,
    trained_tokenizer,
)

# The committed tokenizer's fingerprint as loaded. sst2_bert_tiny's records log 8a96f8945ca5942d: a run fingerprints
# it after tokenising, and the truncation and padding of its last call are part of the definition it hashes.
BERT_STUDY_TOKENIZER = "5ca9471d4a220b49"


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


def test_a_shipped_tokenizer_is_what_every_machine_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two machines' WordPiece trainings differ; a committed one does not. Shipped, it is found before the
    machine's cache, by another machine (another cache folder) too, and one file per texts is kept."""
    shipped, machine_a, machine_b = tmp_path / "shipped", tmp_path / "a", tmp_path / "b"
    monkeypatch.setattr(text_tokenizers, "SHIPPED", shipped)
    texts = list(synthetic_text(num_train=200, num_test=8).train_text)
    monkeypatch.setenv("CADENCE_CACHE", str(machine_a))
    path = ship_tokenizer("bert-tiny", texts, 300)
    assert path == shipped_path("bert-tiny", texts, 300) and path.parent == shipped
    content, stamp = path.read_text(), path.stat().st_mtime_ns
    assert ship_tokenizer("bert-tiny", texts, 300) == path  # shipped again, the same: nothing is written
    assert path.stat().st_mtime_ns == stamp and path.read_text() == content
    from_a = trained_tokenizer("bert-tiny", texts, 300)
    (cached,) = machine_a.glob("tokenizer-bert-tiny-300-*.json")
    cached.write_text("{}")  # machine A's cache is no longer read: a broken file would raise
    assert tokenizer_sha256(trained_tokenizer("bert-tiny", texts, 300)) == tokenizer_sha256(from_a)
    monkeypatch.setenv("CADENCE_CACHE", str(machine_b))
    from_b = trained_tokenizer("bert-tiny", texts, 300)
    assert tokenizer_sha256(from_b) == tokenizer_sha256(from_a) and not list(machine_b.glob("tokenizer-*"))
    assert from_b(texts[:5])["input_ids"] == from_a(texts[:5])["input_ids"]
    path.write_text(trained_tokenizer("bert-tiny", texts, 200).backend_tokenizer.to_str())  # another one shipped
    with pytest.raises(ShippedTokenizerError, match="already shipped for these texts, and differs from this machine"):
        ship_tokenizer("bert-tiny", texts, 300)  # machine B's tokenizer (trained now) is not what is shipped
    assert shipped_path("bert-tiny", texts[:-1], 300) != path != shipped_path("bert-tiny", texts, 200)


def test_the_bert_study_s_texts_find_the_committed_tokenizer() -> None:
    """sst2_bert_tiny's runs load the committed WordPiece tokenizer, the same on every machine (its records name
    it by ``tokenizer_sha256``); a change to the texts a run trains on would silently train another."""
    from cadence_harness.running.recipe import load_recipe

    try:
        data.find_dataset_files("sst2", ["sst2_train.tsv.gz", "sst2_dev.tsv.gz"], None)
    except data.DataNotFoundError:
        pytest.skip("sst2 is not on this machine (sst2_train.tsv.gz, sst2_dev.tsv.gz); see shared/data/README.md")
    recipe = load_recipe("sst2_bert_tiny")
    sst2 = data.load_dataset("sst2", subset=recipe.subset)
    path = shipped_path("bert-tiny", sst2.train_text, 8192)
    assert path.is_file(), f"{path.name} is not shipped: ship it with python -m {text_tokenizers.__name__}"
    assert tokenizer_sha256(trained_tokenizer("bert-tiny", sst2.train_text, 8192)) == BERT_STUDY_TOKENIZER


def test_the_command_says_when_the_same_tokenizer_is_shipped_and_refuses_another_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command harness/README.md documents, run again: exit 0 saying so, not a FileExistsError traceback."""
    recipe = tmp_path / "text.yaml"  # JSON, which YAML reads
    recipe.write_text('{"name": "text", "model": "hf/bert-tiny", "data": "synthetic_text", "duration": "1ba", '
                      '"max_length": 16, "model_kwargs": {"vocab_size": 300}}')  # fmt: skip
    monkeypatch.setattr(text_tokenizers, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path / "cache"))
    text_tokenizers.main([str(recipe)])
    (path,) = (tmp_path / "shipped").iterdir()
    assert capsys.readouterr().out == f"shipped {path}; commit it\n"
    text_tokenizers.main([str(recipe)])
    assert capsys.readouterr().out.startswith(f"{path} is already shipped: this machine's tokenizer for these texts")
    path.write_text(path.read_text().replace('"[UNK]"', '"[UNKNOWN]"'))  # another tokenizer under its name
    with pytest.raises(SystemExit) as exit_:
        text_tokenizers.main([str(recipe)])
    (line,) = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2 and line.startswith(f"python -m {text_tokenizers.__name__}: {path} is already")
    assert line.endswith(f"to ship this machine's instead, remove {path.name} and run this again "
                         "(the runs recorded with the shipped one would then no longer repeat)")  # fmt: skip


def test_the_command_refuses_an_image_recipe_for_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        text_tokenizers.main(["cifar10_resnet20"])
    (line,) = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2 and "cifar10_resnet20 trains on cifar10, not text" in line
