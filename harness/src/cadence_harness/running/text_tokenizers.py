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

__all__ = [
    "SHIPPED",
    "ShippedTokenizerError",
    "build_tokenizer",
    "ship_tokenizer",
    "shipped_path",
    "tokenizer_sha256",
    "trained_tokenizer",
]

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
    return _as_transformers(kind, _machine_tokenizer(kind, texts, vocab_size))


def _machine_tokenizer(kind: str, texts: Sequence[str], vocab_size: int) -> Any:
    """This machine's own tokenizer for `texts` (a `tokenizers.Tokenizer`), shipped or not: the one in its cache,
    else one trained now (then saved there). What `ship_tokenizer` ships."""
    import tokenizers

    key = _digest(f"{CACHE_FORMAT}\0{kind}\0{vocab_size}\0{tokenizers.__version__}", texts)
    path = cache_dir() / f"tokenizer-{kind}-{vocab_size}-{key}.json"
    if not path.is_file():
        tokenizer = _train(kind, texts, vocab_size)
        with replace_when_complete(path) as handle:  # two processes at once: one whole file wins
            handle.write(tokenizer.to_str().encode("utf-8"))
    return tokenizers.Tokenizer.from_file(str(path))  # the one saved, whichever process wrote it


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


class ShippedTokenizerError(FileExistsError):
    """Another tokenizer than this machine's is shipped for the texts: the message says what to do."""


def ship_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, folder: Path | None = None) -> Path:
    """Write this machine's tokenizer for `texts` (its cached one, or trained now) to `folder`, where
    `trained_tokenizer` finds it first on every machine; returns the file's path. Commit it with the study's
    runs: runs made before it saw this machine's (or another machine's) token ids, as their
    ``tokenizer_sha256`` tells.

    Shipping again what is shipped (the same content) writes nothing and returns the path, so the documented
    command can be rerun. Another tokenizer under that name is refused (`ShippedTokenizerError`): every machine
    loads the shipped one, and replacing it would change the token ids of the runs recorded with it."""
    path = shipped_path(kind, texts, vocab_size, folder)
    content = _as_transformers(kind, _machine_tokenizer(kind, texts, vocab_size)).backend_tokenizer.to_str()
    if path.is_file():
        if path.read_text(encoding="utf-8") == content:
            return path
        shipped = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        mine = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
        raise ShippedTokenizerError(
            f"{path} is already shipped for these texts, and differs from this machine's tokenizer for them (file "
            f"sha256 {shipped}, this machine's {mine}; WordPiece trainings differ): every machine loads the shipped "
            f"one, so keep it (nothing to do); to ship this machine's instead, remove {path.name} and run this again "
            "(the runs recorded with the shipped one would then no longer repeat)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
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
    text recipe's runs train (its model's kind, vocabulary size and training texts) to `SHIPPED`; rerun, it says
    that the same one is shipped. What cannot be shipped is refused in one line, exit code 2."""
    import argparse

    from cadence_harness.running import data, resident
    from cadence_harness.running.recipe import RecipeError, load_recipe
    from cadence_harness.running.recipe_checks import DATASETS

    parser = argparse.ArgumentParser(prog="python -m cadence_harness.running.text_tokenizers", description=main.__doc__)
    parser.add_argument("recipe", help="a text recipe whose model is built from a config (hf/bert-tiny, ...)")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    try:
        recipe = load_recipe(args.recipe)
        _, kind = family(recipe.model)
        if DATASETS.get(recipe.data) != "text":
            raise RecipeError(f"{args.recipe} trains on {recipe.data}, not text: only a text recipe has a tokenizer")
        if kind not in HF_CONFIGS:
            raise RecipeError(f"{recipe.model} comes with its own tokenizer; only config-built models train one here")
        dataset = resident.load_dataset(
            recipe.data, data_dir=args.data_dir, subset=recipe.subset, eval_subset=recipe.eval_subset, download=False
        )
        if not isinstance(dataset, data.TextData):
            raise RecipeError(f"recipe {args.recipe}'s data {recipe.data!r} has no texts")
        vocab_size = recipe.model_kwargs.get("vocab_size", DEFAULT_VOCAB_SIZE)
        existed = shipped_path(kind, dataset.train_text, vocab_size).is_file()
        path = ship_tokenizer(kind, dataset.train_text, vocab_size)
    except (RecipeError, ShippedTokenizerError, FileNotFoundError) as error:  # FileNotFoundError: a dataset
        parser.exit(2, f"{parser.prog}: {error}\n")
    print(f"{path} is already shipped: this machine's tokenizer for these texts, the same; nothing to do" if existed
          else f"shipped {path}; commit it")  # fmt: skip


if __name__ == "__main__":
    main()
