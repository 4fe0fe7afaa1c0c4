"""Box targets in the two forms a detection batch carries them.

* **lists**: one dict per image, ``{"boxes": (K, 4) float xyxy pixels, "labels": (K,) int64}`` (torchvision's
  and torchmetrics' form; K differs from image to image).
* **padded**: one float tensor (N, K_max, 5), rows ``[label, x1, y1, x2, y2]``, rows past an image's last box
  holding label -1. A tensor moves to a device, splits into microbatches and shards with a
  ``DistributedSampler`` like any other batch tensor, which a list of dicts does not; `collate_detection`
  makes it, and `DetectionModel` reads either form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PAD_LABEL", "pad_targets", "unpad_targets"]

PAD_LABEL = -1


def pad_targets(targets: Sequence[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Lists of ``{"boxes", "labels"}`` dicts -> one (N, K_max, 5) tensor, padded with label -1 rows."""
    most = max((len(target["labels"]) for target in targets), default=0)
    padded = torch.full((len(targets), max(most, 1), 5), float(PAD_LABEL))
    for index, target in enumerate(targets):
        boxes, labels = target["boxes"], target["labels"]
        if boxes.ndim != 2 or boxes.shape[-1] != 4 or len(boxes) != len(labels):
            raise ValueError(
                f"targets[{index}]: boxes must be (K, 4) with one label each, got boxes {tuple(boxes.shape)} and "
                f"labels {tuple(labels.shape)}"
            )
        padded[index, : len(labels), 0] = labels.to(padded.dtype)
        padded[index, : len(labels), 1:] = boxes.to(padded.dtype)
    return padded


def unpad_targets(targets: Any) -> list[dict[str, torch.Tensor]]:
    """Either form -> lists of ``{"boxes": float (K, 4), "labels": int64 (K,)}`` dicts (the padding rows dropped)."""
    if isinstance(targets, torch.Tensor):
        if targets.ndim != 3 or targets.shape[-1] != 5:
            raise ValueError(
                f"padded targets must be (N, K, 5) rows [label, x1, y1, x2, y2], got a tensor {tuple(targets.shape)}"
            )
        unpadded = []
        for rows in targets:
            kept = rows[rows[:, 0] != PAD_LABEL]
            unpadded.append({"boxes": kept[:, 1:].float(), "labels": kept[:, 0].long()})
        return unpadded
    if isinstance(targets, Sequence) and all(isinstance(t, dict) for t in targets):
        missing = [i for i, t in enumerate(targets) if "boxes" not in t or "labels" not in t]
        if missing:
            raise ValueError(f"targets[{missing[0]}] lacks 'boxes' or 'labels' (keys: {sorted(targets[missing[0]])})")
        return [{"boxes": t["boxes"].float(), "labels": t["labels"].long()} for t in targets]
    raise TypeError(
        f"detection targets must be a (N, K, 5) tensor or a list of {{'boxes', 'labels'}} dicts, "
        f"got {type(targets).__name__}"
    )
