"""Tokenizers trained on a run's own texts (models built from a config have none), cached on disk.

Training HF `tokenizers`' WordPiece is not deterministic: two trainings on the same SST-2 texts give
vocabularies whose ids differ (316 of 8,192 ids, and a few tokens, measured here with tokenizers 0.22;
single-threaded too, huggingface/tokenizers#1794), so two runs of one configuration, or two arms of a
study run in their own processes, would not even share their inputs. The first training on a machine
is therefore saved under the cache folder (`$CADENCE_CACHE`, keyed by the texts, the kind, the vocabulary
size and the tokenizers version) and every later run loads it: on one machine every run of a study sees
the same token ids. Byte-level BPE (GPT-2) trains deterministically, and is cached the same way.

Across machines only a committed tokenizer makes runs repeatable: a study's tokenizer shipped in
`SHIPPED` (``<kind>-<vocabulary size>-<digest of the texts>.json``, found before the machine's cache) is
what every machine loads for those texts, whatever its tokenizers version (the file format is stable; a
training is not). `ship_tokenizer` writes one from this machine's tokenizer for the texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadence_harness.running.data import cache_dir, replace_when_complete
from cadence_harness.running.models import HF_CONFIGS, family, pretrained_folder

__all__ = ["SHIPPED", "build_tokenizer", "ship_tokenizer", "shipped_path", "tokenizer_sha256", "trained_tokenizer"]

CACHE_FORMAT = 1
DEFAULT_VOCAB_SIZE = 8192  # a config-built model's vocabulary unless its recipe sets model_kwargs.vocab_size
SHIPPED = Path(__file__).with_name("shipped_tokenizers")  # committed: the same tokenizer on every machine
BERT_SPECIALS = {
    "unk_token": "[UNK]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


def build_tokenizer(name: str, train_texts: Sequence[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> Any:
    """The tokenizer of an hf/ model: trained on `train_texts` for a config-built model (once per machine, see
    `text_tokenizers`), else the model's own."""
    import transformers

    _, arch = family(name)
    if arch in HF_CONFIGS:
        return trained_tokenizer(arch, train_texts, vocab_size)
    tokenizer = transformers.AutoTokenizer.from_pretrained(pretrained_folder(arch))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def trained_tokenizer(kind: str, texts: Sequence[str], vocab_size: int) -> Any:
    """A WordPiece (``bert-tiny``) or byte-level BPE (GPT-2) tokenizer for `texts` as a transformers tokenizer:
    the one this machine trained first on the same texts and settings, else a new one (then saved)."""
    import tokenizers

    shipped = shipped_path(kind, texts, vocab_size)
    if shipped.is_file():
        return _as_transformers(kind, tokenizers.Tokenizer.from_file(str(shipped)))
    key = _digest(f"{CACHE_FORMAT}\0{kind}\0{vocab_size}\0{tokenizers.__version__}", texts)
    path = cache_dir() / f"tokenizer-{kind}-{vocab_size}-{key}.json"
    if path.is_file():
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    else:
        tokenizer = _train(kind, texts, vocab_size)
        with replace_when_complete(path) as handle:  # two processes at once: one whole file wins
            handle.write(tokenizer.to_str().encode("utf-8"))
        tokenizer = tokenizers.Tokenizer.from_file(str(path))  # the one saved, whichever process wrote it
    return _as_transformers(kind, tokenizer)


def shipped_path(kind: str, texts: Sequence[str], vocab_size: int, folder: Path | None = None) -> Path:
    """Where a committed tokenizer for `texts` lies: keyed by the kind, the vocabulary size and the texts alone
    (not the tokenizers version: loading a saved tokenizer gives the same ids in every version)."""
    key = _digest(f"{kind}\0{vocab_size}\0", texts)
    return (folder or SHIPPED) / f"{kind}-{vocab_size}-{key}.json"


def _digest(header: str, texts: Sequence[str]) -> str:
    """16 hex digits of the SHA-256 of `header` and every text, each text ended by a NUL."""
    digest = hashlib.sha256(header.encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def ship_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, folder: Path | None = None) -> Path:
    """Write this machine's tokenizer for `texts` (trained now, or its cached one) to `folder`, where
    `trained_tokenizer` finds it first on every machine; returns the file's path. Commit it with the study's
    runs: runs made before it saw this machine's (or another machine's) token ids, as their
    ``tokenizer_sha256`` tells."""
    path = shipped_path(kind, texts, vocab_size, folder)
    if path.is_file():
        raise FileExistsError(f"{path} is already shipped for these texts; remove it first to ship another")
    backend = trained_tokenizer(kind, texts, vocab_size).backend_tokenizer
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(backend.to_str(), encoding="utf-8")
    return path


def tokenizer_sha256(tokenizer: Any) -> str:
    """A fingerprint of a (fast) tokenizer's whole definition, vocabulary included, logged with every text run:
    two machines' WordPiece trainings differ, so a run on another machine computes something else (BERT-Tiny's
    runs repeated on another machine counted 6 % fewer FLOPs than the recorded ones, with other accuracies), and
    the records say which token ids each run saw. The definition includes the truncation and padding of the
    tokenizer's last call, so a run's value (taken after tokenising) names its tokenizer and how it was called."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    return hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()[:16]


def _train(kind: str, texts: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "bert-tiny":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tokenizer.train_from_iterator(
            texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
        )
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
        )
        tokenizer.decoder = decoders.WordPiece()
        return tokenizer
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _as_transformers(kind: str, tokenizer: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    if kind == "bert-tiny":
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **BERT_SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m cadence_harness.running.text_tokenizers RECIPE --data-dir DIR``: ship the tokenizer that a
    text recipe's runs train (its model's kind, vocabulary size and training texts) to `SHIPPED`."""
    import argparse

    from cadence_harness.running import data, resident
    from cadence_harness.running.recipe import load_recipe

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("recipe", help="a text recipe whose model is built from a config (hf/bert-tiny, ...)")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    _, kind = family(recipe.model)
    if kind not in HF_CONFIGS:
        parser.error(f"{recipe.model} comes with its own tokenizer; only config-built models train one here")
    dataset = resident.load_dataset(
        recipe.data, data_dir=args.data_dir, subset=recipe.subset, eval_subset=recipe.eval_subset, download=False
    )
    if not isinstance(dataset, data.TextData):
        parser.error(f"recipe {args.recipe}'s data {recipe.data!r} has no texts")
    print(ship_tokenizer(kind, dataset.train_text, recipe.model_kwargs.get("vocab_size", DEFAULT_VOCAB_SIZE)))


if __name__ == "__main__":
    main()
