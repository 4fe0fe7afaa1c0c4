"""What a method package's tests share: `MethodConformance` (the contract every method meets), tiny
models and datasets, a few-step Trainer, checks (bitwise state equality, the aten ops a block runs), and
a plugin distribution written for a test (`write_plugin_distribution`).

A method package subclasses `MethodConformance` in its own tests; see `cadence.testing.conformance`.
"""

from cadence.testing.builders import (
    DictImageClassifier,
    DictImageDataset,
    NoOpAlgorithm,
    TinyCNN,
    digits_datasets,
    image_dataset,
    mlp_classifier,
    sgd_trainer,
    tiny_image_classifier,
)
from cadence.testing.checks import HOST_SYNC_OPS, assert_same_tensors, recording_ops
from cadence.testing.conformance import MethodConformance
from cadence.testing.plugins import write_plugin_distribution

__all__ = [
    "HOST_SYNC_OPS",
    "DictImageClassifier",
    "DictImageDataset",
    "MethodConformance",
    "NoOpAlgorithm",
    "TinyCNN",
    "assert_same_tensors",
    "digits_datasets",
    "image_dataset",
    "mlp_classifier",
    "recording_ops",
    "sgd_trainer",
    "tiny_image_classifier",
    "write_plugin_distribution",
]
