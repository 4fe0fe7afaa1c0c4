"""COCO mAP as one number, so the Trainer can log it and the harness can aim at it.

The Trainer computes ``float(metric.compute())`` for every evaluation metric; torchmetrics'
``MeanAveragePrecision`` returns a dict (map, map_50, map_75, per-size values, recalls). `DetectionMAP`
returns the entry `key` (``"map"``: mAP@[.5:.95], COCO's headline number) and keeps the whole dict in
``results`` after each compute.
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics.detection import MeanAveragePrecision

__all__ = ["RESULT_KEYS", "DetectionMAP"]

RESULT_KEYS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100")


class DetectionMAP(MeanAveragePrecision):
    """``MeanAveragePrecision`` (COCO's evaluation through pycocotools, boxes ``xyxy`` in pixels) reduced to one entry.

    Args:
        key: the entry `compute` returns, one of `RESULT_KEYS` (default ``"map"``, mAP@[.5:.95]).
        **kwargs: passed to ``MeanAveragePrecision`` (``iou_thresholds``, ``class_metrics``, ``backend``, ...).
    """

    def __init__(self, key: str = "map", **kwargs: Any):
        if key not in RESULT_KEYS:
            raise ValueError(f"key={key!r}: use one of {', '.join(RESULT_KEYS)}")
        kwargs.setdefault("box_format", "xyxy")
        kwargs.setdefault("iou_type", "bbox")
        super().__init__(**kwargs)
        self.key = key
        self.results: dict[str, torch.Tensor] = {}

    def compute(self) -> torch.Tensor:  # type: ignore[override]
        self.results = dict(super().compute())
        return self.results[self.key].float()
