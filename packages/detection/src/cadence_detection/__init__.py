"""cadence-detection: object detectors under cadence's Trainer, as Composer's ``MMDetModel`` wraps MMDetection models.

``DetectionModel(detector)`` trains any detector with torchvision's interface (loss dict in training mode,
boxes in eval mode) and evaluates COCO mAP; ``torchvision_detector("fcos_resnet50_fpn", num_classes=4)`` builds
one by name (random initialisation); ``make_shapes_dataset`` writes a small COCO-format data set to disk and
``ShapesDetection`` reads it back.
"""

from cadence_detection.methods import REFUSED, SUPPORTED, DetectionMethodCheck, check_methods
from cadence_detection.metrics import DetectionMAP
from cadence_detection.model import ComposerDetectionModel, DetectionModel
from cadence_detection.shapes import (
    CATEGORIES,
    NUM_CLASSES,
    ShapesDetection,
    collate_detection,
    load_split_tensors,
    make_shapes_dataset,
)
from cadence_detection.targets import pad_targets, unpad_targets
from cadence_detection.torchvision_models import SMALL_KINDS, detector_names, small_detector, torchvision_detector

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
    "detector_names",
    "load_split_tensors",
    "make_shapes_dataset",
    "pad_targets",
    "small_detector",
    "torchvision_detector",
    "unpad_targets",
]
