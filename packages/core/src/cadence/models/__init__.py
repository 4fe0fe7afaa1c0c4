"""Models: the `Model` interface and wrappers for common model families."""

from cadence.models.base import Model, total_loss
from cadence.models.classifier import Classifier, CrossEntropy, soft_cross_entropy

ComposerModel = Model  # Composer's names, so its users can switch by changing an import
ComposerClassifier = Classifier

__all__ = [
    "Classifier",
    "ComposerClassifier",
    "ComposerModel",
    "CrossEntropy",
    "Model",
    "soft_cross_entropy",
    "total_loss",
]
