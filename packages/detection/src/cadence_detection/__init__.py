"""cadence-detection: object detectors under cadence's Trainer, as Composer's ``MMDetModel`` wraps MMDetection models.

``DetectionModel(detector)`` trains any detector with torchvision's interface (loss dict in training mode,
boxes in eval mode) and evaluates COCO mAP; ``torchvision_detector("fcos_resnet50_fpn", num_classes=4)`` builds
one by name (random initialisation); ``make_shapes_dataset`` writes a small COCO-format data set to disk and
``ShapesDetection`` reads it back. Names are imported on first use, so asking for detector names does not
import torchmetrics.
"""

from typing import Any

__all__ = [
    "CATEGORIES",
    "NUM_CLASSES",
    "REFUSED",
    "SMALL_KINDS",
    "SUPPORTED",
    "ComposerDetectionModel",
    "DetectionMAP",
    "DetectionMethodCheck",
    "DetectionModel",
    "ShapesDetection",
    "check_methods",
    "collate_detection",
    "detector_by_name",
    "detector_names",
    "load_split_tensors",
    "make_shapes_dataset",
    "pad_targets",
    "small_detector",
    "small_names",
    "torchvision_detector",
    "unpad_targets",
]

_MODULES = {
    "methods": ("REFUSED", "SUPPORTED", "DetectionMethodCheck", "check_methods"),
    "metrics": ("DetectionMAP",),
    "model": ("ComposerDetectionModel", "DetectionModel"),
    "shapes": (
        "CATEGORIES",
        "NUM_CLASSES",
        "ShapesDetection",
        "collate_detection",
        "load_split_tensors",
        "make_shapes_dataset",
    ),
    "targets": ("pad_targets", "unpad_targets"),
    "torchvision_models": (
        "SMALL_KINDS",
        "detector_by_name",
        "detector_names",
        "small_detector",
        "small_names",
        "torchvision_detector",
    ),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"cadence_detection.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
