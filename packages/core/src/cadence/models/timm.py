"""`timm_model`: a timm image model by name, wrapped in a `Classifier` (Composer's ``composer_timm``).

timm is imported when the function is called, so ``import cadence`` works without it.
"""

from __future__ import annotations

import difflib
from typing import Any

from cadence.models.classifier import Classifier

__all__ = ["timm_model"]


def timm_model(model_name: str, num_classes: int = 1000, pretrained: bool = False, **kwargs: Any) -> Classifier:
    """Build ``timm.create_model(model_name, ...)`` and wrap it in a `Classifier`.

    Args:
        model_name: any name ``timm.list_models()`` knows, e.g. ``"resnet18"`` or ``"vit_tiny_patch16_224"``.
        num_classes: size of the classification head.
        pretrained: download (or read from timm's cache) pretrained weights. Off by default:
            weights come from a hub, which offline machines cannot reach.
        **kwargs: passed to ``timm.create_model`` (``in_chans``, ``drop_path_rate``, ``img_size``,
            ``checkpoint_path``, ...).
    """
    try:
        import timm
    except ImportError as error:
        raise ImportError("timm_model needs timm; install it with `pip install timm`") from error
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an int >= 2")
    if not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name, timm.list_models(), n=5, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else "; see timm.list_models()"
        raise ValueError(f"model_name={model_name!r} is not a timm model{hint}")
    module = timm.create_model(model_name, pretrained=pretrained, num_classes=num_classes, **kwargs)
    return Classifier(module, num_classes=num_classes)
