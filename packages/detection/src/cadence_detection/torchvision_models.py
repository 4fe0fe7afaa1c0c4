"""torchvision detectors by name, randomly initialised, wrapped in `DetectionModel`.

* `torchvision_detector`: any of ``torchvision.models.detection``'s builders (``fcos_resnet50_fpn``,
  ``retinanet_resnet50_fpn``, ``fasterrcnn_mobilenet_v3_large_fpn``, ...) with ``weights=None,
  weights_backbone=None``: no weights are downloaded.
* `small_detector`: the same detector classes (FCOS, RetinaNet, Faster R-CNN) on a ResNet-18 trunk with a narrow
  FPN and anchors sized for images of 64-256 pixels: what CPU tests and the shapes set need.
"""

from __future__ import annotations

import difflib
from typing import Any

from torch import nn

from cadence_detection.model import DetectionModel

__all__ = [
    "SMALL_KINDS",
    "detector_by_name",
    "detector_names",
    "small_detector",
    "small_names",
    "torchvision_detector",
]

SMALL_KINDS = ("fcos", "retinanet", "fasterrcnn")
# Proposal and sampling counts for small images with a few objects (torchvision's: 2000/2000, 1000/1000, 512).
SMALL_RCNN_DEFAULTS = {
    "rpn_pre_nms_top_n_train": 300,
    "rpn_post_nms_top_n_train": 150,
    "rpn_pre_nms_top_n_test": 150,
    "rpn_post_nms_top_n_test": 100,
    "box_batch_size_per_image": 64,
}


def detector_names() -> list[str]:
    """The box detectors of ``torchvision.models.detection`` (what `torchvision_detector` accepts). Mask and
    keypoint R-CNN are left out: their training needs mask or keypoint targets, which `DetectionModel` lacks."""
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models.detection)
    return sorted(name for name in names if not name.startswith(("maskrcnn", "keypointrcnn")))


def torchvision_detector(name: str, num_classes: int, **kwargs: Any) -> DetectionModel:
    """``torchvision.models.get_model(name, weights=None, weights_backbone=None, ...)`` in a `DetectionModel`.

    Args:
        name: a detection builder, e.g. ``"fcos_resnet50_fpn"``.
        num_classes: for FCOS and RetinaNet the labels are 0 .. num_classes-1; Faster R-CNN keeps 0 for the
            background. Labels taken from COCO category ids (from 1) work with all of them at max id + 1.
        **kwargs: passed to the builder (``min_size``, ``max_size``, ``score_thresh``, ``trainable_backbone_layers``,
            ...). ``weights`` or ``weights_backbone`` other than None are refused: nothing is downloaded.
    """
    import torchvision

    known = detector_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"name={name!r} is not a torchvision detector; {hint}known: {', '.join(known)}")
    _check_num_classes(num_classes)
    for key in ("weights", "weights_backbone"):
        if kwargs.get(key) is not None:
            raise ValueError(f"{key}={kwargs[key]!r}: detectors are built randomly initialised here; leave {key} out")
        kwargs.pop(key, None)
    detector = torchvision.models.get_model(
        name, weights=None, weights_backbone=None, num_classes=num_classes, **kwargs
    )
    return DetectionModel(detector, num_classes=num_classes)


def small_detector(
    kind: str,
    num_classes: int,
    *,
    min_size: int = 128,
    max_size: int | None = None,
    fpn_channels: int = 64,
    **kwargs: Any,
) -> DetectionModel:
    """FCOS, RetinaNet or Faster R-CNN on a randomly initialised ResNet-18 with a `fpn_channels`-wide FPN.

    Anchors start at 8 pixels (torchvision's defaults start at 32 and suit 800-pixel images). `min_size` and
    `max_size` are the detector's resize bounds: set them to the images' size to train at that size.
    **kwargs go to the detector class (``score_thresh``, ``detections_per_img``, ...).
    """
    import torchvision
    from torchvision.models.detection import FCOS, FasterRCNN, RetinaNet
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool, LastLevelP6P7

    if kind not in SMALL_KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(SMALL_KINDS)}")
    _check_num_classes(num_classes)
    if not isinstance(fpn_channels, int) or fpn_channels < 8:
        raise ValueError(f"fpn_channels={fpn_channels!r} must be an int >= 8")
    trunk = torchvision.models.resnet18(weights=None)
    widths = {"layer1": 64, "layer2": 128, "layer3": 256, "layer4": 512}
    layers = ["layer1", "layer2", "layer3", "layer4"] if kind == "fasterrcnn" else ["layer2", "layer3", "layer4"]
    extra: nn.Module = LastLevelMaxPool() if kind == "fasterrcnn" else LastLevelP6P7(fpn_channels, fpn_channels)
    backbone = BackboneWithFPN(
        trunk,
        return_layers={layer: str(index) for index, layer in enumerate(layers)},
        in_channels_list=[widths[layer] for layer in layers],
        out_channels=fpn_channels,
        extra_blocks=extra,  # type: ignore[arg-type]
    )
    sizes = {"min_size": min_size, "max_size": max_size or min_size}
    base = (8, 16, 32, 64, 128)
    if kind == "fcos":
        anchors = AnchorGenerator(tuple((s,) for s in base), ((1.0,),) * 5)
        detector: nn.Module = FCOS(backbone, num_classes, anchor_generator=anchors, **sizes, **kwargs)
    elif kind == "retinanet":
        scales = tuple((s, round(s * 2 ** (1 / 3)), round(s * 2 ** (2 / 3))) for s in base)
        anchors = AnchorGenerator(scales, ((0.5, 1.0, 2.0),) * 5)
        detector = RetinaNet(backbone, num_classes, anchor_generator=anchors, **sizes, **kwargs)
    else:
        anchors = AnchorGenerator(tuple((s,) for s in base), ((0.5, 1.0, 2.0),) * 5)
        for key, value in SMALL_RCNN_DEFAULTS.items():
            kwargs.setdefault(key, value)
        detector = FasterRCNN(backbone, num_classes, rpn_anchor_generator=anchors, **sizes, **kwargs)
    return DetectionModel(detector, num_classes=num_classes)


def _check_num_classes(num_classes: Any) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an int >= 2 (the largest label + 1)")


def small_names() -> list[str]:
    """``fcos_small``, ``retinanet_small``, ``fasterrcnn_small``: what `detector_by_name` hands to `small_detector`."""
    return [f"{kind}_small" for kind in SMALL_KINDS]


def detector_by_name(
    name: str,
    num_classes: int,
    *,
    image_size: int,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    **kwargs: Any,
) -> DetectionModel:
    """A torchvision detector (`detector_names`) or a small one (`small_names`) that trains at `image_size` pixels.

    `mean` and `std` (the training images' channel statistics, in [0, 1]) replace the ImageNet statistics the
    detector's transform normalises with; without them it keeps ImageNet's.
    """
    stats = {"image_mean": list(mean), "image_std": list(std)} if mean is not None and std is not None else {}
    sizes = {} if name.startswith("ssd") else {"min_size": image_size, "max_size": image_size}  # SSDs: fixed size
    kwargs = {**sizes, **stats, **kwargs}
    if name in small_names():
        return small_detector(name.removesuffix("_small"), num_classes, **kwargs)
    return torchvision_detector(name, num_classes, **kwargs)
