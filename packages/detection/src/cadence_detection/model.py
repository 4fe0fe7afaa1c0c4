"""`DetectionModel`: a detector as a cadence `Model` (Composer's ``ComposerModel``), as Composer's ``MMDetModel`` does.

Training runs the detector in loss mode and returns its loss dict, which the Trainer sums (`cadence.models.total_loss`);
evaluation runs it in prediction mode and scores the boxes with COCO mAP (`DetectionMAP`). Batches are
``(images, targets)``: images a (N, 3, H, W) tensor (uint8 in 0-255 or float in [0, 1]) or a list of (3, H, W)
tensors of any sizes; targets padded (N, K, 5) or lists of ``{"boxes", "labels"}`` dicts (`cadence_detection.targets`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cadence.models import Model
from cadence_detection.targets import unpad_targets

__all__ = ["ComposerDetectionModel", "DetectionModel"]


def _as_image_list(images: Any) -> list[torch.Tensor]:
    if isinstance(images, torch.Tensor):
        if images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W) or a list of (C, H, W), got a tensor {tuple(images.shape)}")
        images = list(images.unbind(0))
    if not isinstance(images, (list, tuple)) or not all(isinstance(i, torch.Tensor) for i in images):
        raise TypeError(f"images must be a tensor or a list of tensors, got {type(images).__name__}")
    return [image.float().div(255) if image.dtype == torch.uint8 else image for image in images]


class DetectionModel(Model):
    """``DetectionModel(detector)``: any module with torchvision's detection interface.

    In training mode ``detector(images, targets)`` returns a dict of losses; in eval mode ``detector(images)``
    returns one ``{"boxes", "scores", "labels"}`` dict per image (torchvision's FCOS, RetinaNet, Faster R-CNN,
    Mask R-CNN, SSD; `cadence_detection.torchvision_detector` builds them by name).

    Args:
        detector: the detection module.
        num_classes: recorded for users and the harness; taken from ``detector.num_classes`` if omitted.
        val_metrics: metrics by name; default ``{"MeanAveragePrecision": DetectionMAP()}`` (mAP@[.5:.95]).
    """

    def __init__(
        self, detector: nn.Module, num_classes: int | None = None, val_metrics: Mapping[str, Any] | None = None
    ):
        super().__init__()
        if not isinstance(detector, nn.Module):
            raise TypeError(f"detector must be a torch.nn.Module, got {type(detector).__name__}")
        self.module = detector
        self.num_classes = num_classes if num_classes is not None else _num_classes(detector)
        self._val_metrics = dict(val_metrics) if val_metrics is not None else None

    def forward(self, batch: Any) -> Any:
        """The loss dict in training mode (Composer's ``mode='loss'``); the detections in eval mode."""
        images, targets = batch
        if not self.training:
            return self.module(_as_image_list(images))
        return self.module(_as_image_list(images), unpad_targets(targets))

    def loss(self, outputs: Any, batch: Any, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """The detector's own losses; the Trainer back-propagates their sum."""
        del batch, args, kwargs
        if not isinstance(outputs, Mapping):
            raise TypeError(
                f"DetectionModel.loss needs the loss dict of a forward in training mode, got {type(outputs).__name__}; "
                "call model.train() before forward"
            )
        return dict(outputs)

    def eval_forward(self, batch: Any, outputs: Any | None = None) -> list[dict[str, torch.Tensor]]:
        """Detections of every image, in the input images' pixel coordinates."""
        if outputs is not None:
            return outputs
        images, _ = batch
        was_training = self.module.training
        self.module.eval()
        try:
            return self.module(_as_image_list(images))
        finally:
            self.module.train(was_training)

    def training_procedures(self) -> list[Any]:
        """What every run of this model trains with beside its methods (the harness adds them): the check that
        refuses methods which would train a detector on wrong targets (`cadence_detection.methods`)."""
        from cadence_detection.methods import DetectionMethodCheck

        return [DetectionMethodCheck()]

    def get_metrics(self, is_train: bool = False) -> dict[str, Any]:
        """No training metrics (a detector in training mode returns losses, not boxes); COCO mAP on evaluation."""
        if is_train:
            return {}
        if self._val_metrics is not None:
            return {name: copy.deepcopy(metric) for name, metric in self._val_metrics.items()}
        from cadence_detection.metrics import DetectionMAP  # lazily: torchmetrics only once a run evaluates

        return {"MeanAveragePrecision": DetectionMAP()}

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        _, targets = batch
        predictions = [{key: value.detach() for key, value in output.items()} for output in outputs]
        metric.update(predictions, unpad_targets(targets))


ComposerDetectionModel = DetectionModel


def _num_classes(detector: nn.Module) -> int | None:
    for path in (
        "num_classes",
        "head.classification_head.num_classes",
        "roi_heads.box_predictor.cls_score.out_features",
    ):
        value: Any = detector
        for part in path.split("."):
            value = getattr(value, part, None)
        if isinstance(value, int):
            return value
    return None
