"""Models: the `Model` interface and wrappers for common model families.

`HuggingFaceModel` and `timm_model` are imported on first use, so ``import cadence``
never imports transformers or timm.
"""

from typing import Any

from cadence.models.base import Model, total_loss
from cadence.models.classifier import Classifier
from cadence.ops.targets import soft_cross_entropy

ComposerModel = Model  # Composer's names, so its users can switch by changing an import
ComposerClassifier = Classifier

__all__ = [
    "Classifier",
    "ComposerClassifier",
    "ComposerModel",
    "CrossEntropy",
    "HuggingFaceModel",
    "LanguageCrossEntropy",
    "LanguagePerplexity",
    "Model",
    "soft_cross_entropy",
    "timm_model",
    "total_loss",
]

_LAZY = {
    "CrossEntropy": "cadence.metrics",
    "HuggingFaceModel": "cadence.models.huggingface",
    "LanguageCrossEntropy": "cadence.models.huggingface",
    "LanguagePerplexity": "cadence.models.huggingface",
    "timm_model": "cadence.models.timm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
