"""Route (b) of issue 30: mmcv's compiled operators, for what MMDetection's YOLOX uses, from ``torchvision.ops``.

``mmdet`` 3.3 needs ``mmcv`` < 2.2 with its compiled extension (``mmcv._ext``); PyPI has ``mmcv`` only as source,
and ``mmcv-lite`` (the same Python code, no extension) fails at ``import mmcv.ops``. `install` registers a module
``mmcv._ext`` whose ``nms`` is ``torchvision.ops.nms`` (what ``mmcv.ops.nms`` and ``batched_nms`` call, and so
YOLOX's post-processing); every other operator exists by name, so ``mmcv.ops`` and ``mmdet.models`` import, and
raises `NotImplementedError` naming itself when called. A real compiled ``mmcv._ext``, when installed, is used
instead.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["IMPLEMENTED", "TorchvisionExtension", "install"]


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0) -> torch.Tensor:
    """mmcv's ``ext_module.nms``: kept indices, highest score first. `offset` 1 is mmcv's legacy pixel convention
    (a box is x2 - x1 + 1 wide), the same as torchvision's on boxes grown by one pixel."""
    from torchvision.ops import nms

    if boxes.numel() == 0:
        return boxes.new_zeros(0, dtype=torch.long)
    if offset:
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:4] + offset], dim=1)
    return nms(boxes[:, :4].float(), scores.float(), float(iou_threshold))


IMPLEMENTED: dict[str, Callable[..., Any]] = {
    "nms": _nms,
    "get_compiler_version": lambda: "none (cadence_detection.mmcv_ops: torchvision.ops)",
    "get_compiling_cuda_version": lambda: "none (cadence_detection.mmcv_ops: torchvision.ops)",
}


class TorchvisionExtension(types.ModuleType):
    """A stand-in for ``mmcv._ext``: the operators in `IMPLEMENTED`, and for any other name one that refuses."""

    def __init__(self) -> None:
        super().__init__("mmcv._ext", __doc__)
        for name, function in IMPLEMENTED.items():
            setattr(self, name, function)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(
                f"mmcv operator {name!r} has no torchvision-backed version in cadence_detection.mmcv_ops (there: "
                f"{', '.join(sorted(IMPLEMENTED))}); a model that calls it needs mmcv built with its compiled ops"
            )

        missing.__name__ = name
        return missing


def install() -> bool:
    """Make ``import mmcv.ops`` work: True if the torchvision-backed extension was installed, False if a compiled
    ``mmcv._ext`` (or one installed before) is there. Call it before importing ``mmcv.ops`` or ``mmdet.models``."""
    if "mmcv._ext" in sys.modules:
        return isinstance(sys.modules["mmcv._ext"], TorchvisionExtension)
    try:
        importlib.import_module("mmcv._ext")
        return False
    except ImportError:
        pass
    import mmcv

    extension = TorchvisionExtension()
    sys.modules["mmcv._ext"] = extension
    mmcv._ext = extension  # type: ignore[attr-defined]
    return True
