"""`MMDetModel`: an MMDetection detector as a cadence `Model`, as Composer's ``MMDetModel`` (its model guide's YOLOX).

Training calls the detector in ``mode="loss"`` and returns its loss dict (the Trainer sums it); evaluation calls
``mode="predict"`` and scores the boxes with COCO mAP (`DetectionMAP`). The detector's ``data_preprocessor`` runs
first, as MMEngine's ``train_step`` runs it (casting, normalising, padding to its size divisor, batch
augmentations). Batches are the same ``(images, targets)`` pairs `DetectionModel` takes, so the shapes set, its
collate and the harness's loaders serve both; the wrapper makes MMDetection's ``DetDataSample`` objects from them.

Needs ``mmdet`` 3.x with ``mmcv`` < 2.2: a compiled ``mmcv``, or ``mmcv-lite`` plus `cadence_detection.mmcv_ops`
(``make install-detection``; `yolox` installs the ops provider itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from cadence.models import Model
from cadence_detection.model import DetectionModel, _as_image_list
from cadence_detection.targets import unpad_targets

__all__ = ["YOLOX_SIZES", "MMDetModel", "yolox"]

YOLOX_SIZES = ("nano", "tiny", "s", "m", "l", "x")


class MMDetModel(Model):
    """``MMDetModel(model)``: an ``mmdet`` detector (``mmdet.models.BaseDetector``).

    Args:
        model: the detector, e.g. ``MODELS.build(cfg.model)`` with ``init_weights()`` called.
        label_offset: subtracted from the batches' labels to make MMDetection's 0-based class indices (1 for
            COCO-style category ids from 1, as the shapes set has); added back to predicted labels for the metric.
        val_metrics: metrics by name; default ``{"MeanAveragePrecision": DetectionMAP()}``.
    """

    def __init__(self, model: nn.Module, label_offset: int = 0, val_metrics: Mapping[str, Any] | None = None):
        super().__init__()
        if not hasattr(model, "data_preprocessor"):
            raise TypeError(f"model must be an mmdet detector with a data_preprocessor, got {type(model).__name__}")
        self.model = model
        self.label_offset = label_offset
        self._val_metrics = dict(val_metrics) if val_metrics is not None else None

    def _mmdet_batch(self, batch: Any) -> dict[str, Any]:
        from mmdet.structures import DetDataSample
        from mmengine.structures import InstanceData

        images, targets = batch
        pixels = [image.mul(255) if image.is_floating_point() else image for image in _as_image_list(images)]
        samples = []
        for image, target in zip(pixels, unpad_targets(targets)):
            shape = tuple(image.shape[-2:])
            sample = DetDataSample(metainfo={"img_shape": shape, "ori_shape": shape, "scale_factor": (1.0, 1.0)})
            labels = target["labels"] - self.label_offset
            sample.gt_instances = InstanceData(bboxes=target["boxes"], labels=labels)
            samples.append(sample)
        preprocess = cast(nn.Module, self.model.data_preprocessor)  # Module.__getattr__ says Tensor | Module
        return preprocess({"inputs": pixels, "data_samples": samples}, self.training)

    def forward(self, batch: Any) -> dict[str, Any]:
        """The detector's losses (Composer: ``self.model(**batch, mode='loss')``)."""
        return self.model(**self._mmdet_batch(batch), mode="loss")

    def loss(self, outputs: Any, batch: Any, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """The entries whose name holds ``loss``, lists summed (MMEngine's ``parse_losses``); the Trainer sums them."""
        del batch, args, kwargs
        losses: dict[str, torch.Tensor] = {}
        for name, value in outputs.items():
            if "loss" in name:
                # MMDet's loss lists hold a tensor per level: their sum is one (`sum`'s hint adds an empty list's 0)
                losses[name] = cast(torch.Tensor, sum(value)) if isinstance(value, (list, tuple)) else value
        return losses

    def eval_forward(self, batch: Any, outputs: Any | None = None) -> list[dict[str, torch.Tensor]]:
        """Boxes, scores and labels of every image (``mode='predict'``), labels back in the batches' numbering."""
        if outputs is not None:
            return outputs
        was_training = self.training
        self.eval()
        try:
            predictions = self.model(**self._mmdet_batch(batch), mode="predict")
        finally:
            self.train(was_training)
        return [
            {
                "boxes": p.pred_instances.bboxes,
                "scores": p.pred_instances.scores,
                "labels": p.pred_instances.labels + self.label_offset,
            }
            for p in predictions
        ]

    # COCO mAP on the same (boxes, scores, labels) predictions as a torchvision detector's: one implementation
    get_metrics = DetectionModel.get_metrics
    update_metric = DetectionModel.update_metric

    def training_procedures(self) -> list[Any]:
        from cadence_detection.methods import DetectionMethodCheck

        return [DetectionMethodCheck()]


def yolox(size: str = "tiny", num_classes: int = 80, label_offset: int = 0, **head: Any) -> MMDetModel:
    """YOLOX-`size` from MMDetection's own config (``configs/yolox/yolox_<size>_8xb8-300e_coco.py``), randomly
    initialised, with `num_classes` classes and without the config's multi-scale batch resizing (480-800 pixels:
    the images' own size is kept). `head` updates ``model.test_cfg`` (``score_thr``, ``nms``, ``max_per_img``)."""
    if size not in YOLOX_SIZES:
        raise ValueError(f"size={size!r}: use one of {', '.join(YOLOX_SIZES)}")
    from cadence_detection.mmcv_ops import install

    install()
    import mmdet
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config

    register_all_modules()
    config = Path(mmdet.__file__).parent / ".mim" / "configs" / "yolox" / f"yolox_{size}_8xb8-300e_coco.py"
    if not config.is_file():
        raise FileNotFoundError(f"{config} is missing: the mmdet wheel ships its configs in mmdet/.mim")
    cfg = Config.fromfile(str(config)).model
    cfg.bbox_head.num_classes = num_classes
    cfg.data_preprocessor.batch_augments = None
    cfg.test_cfg.update(head)
    model = MODELS.build(cfg)
    model.init_weights()
    return MMDetModel(model, label_offset=label_offset)
