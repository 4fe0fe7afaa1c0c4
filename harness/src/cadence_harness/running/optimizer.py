"""The recipe's optimizer as a run builds it, with the two settings that are not the optimizer class's own.

* ``norm_lr_scale``: the parameters of normalisation layers (batch, group, layer norm) train with the
  learning rate times this factor and the weight decay divided by it, so their decay per step is
  unchanged (airbench trains its batch-norm biases 64x faster).
* ``lookahead``: a table (``{every = 5, decay = 0.7738, power = 3}``) that adds `Lookahead` to the run.

Both are keys of ``[optimizer]`` that exist only where a recipe sets them, so the configuration (and
hash) of every recipe without them is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cadence import Algorithm
from cadence_harness.running.lookahead import Lookahead, check_lookahead
from cadence_harness.running.recipe_checks import OPTIMIZER_EXTRAS, OPTIMIZERS, RecipeError

__all__ = ["build_optimizer", "check_harness_keys", "optimizer_procedures"]

_NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def check_harness_keys(optimizer: Mapping[str, Any]) -> None:
    """Refuse a bad ``norm_lr_scale`` or ``lookahead`` (a `RecipeError` naming the key)."""
    scale = optimizer.get("norm_lr_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise RecipeError(f"`optimizer.norm_lr_scale` = {scale!r} must be a number > 0 (1 leaves norms alone)")
    if "lookahead" in optimizer:
        try:
            check_lookahead(optimizer["lookahead"])
        except ValueError as error:
            raise RecipeError(str(error)) from None


def _norm_parameters(model: nn.Module) -> set[int]:
    return {id(p) for module in model.modules() if isinstance(module, _NORMS) for p in module.parameters(False)}


def build_optimizer(settings: Mapping[str, Any], model: nn.Module) -> torch.optim.Optimizer:
    """``OPTIMIZERS[name](params, **kwargs)``; with ``norm_lr_scale`` != 1, two parameter groups."""
    kwargs = {k: v for k, v in settings.items() if k not in ("name", *OPTIMIZER_EXTRAS)}
    cls = OPTIMIZERS[settings["name"]]
    scale = settings.get("norm_lr_scale", 1.0)
    if scale == 1.0:
        return cls(model.parameters(), **kwargs)
    norms = _norm_parameters(model)
    others = [p for p in model.parameters() if id(p) not in norms]
    scaled = [p for p in model.parameters() if id(p) in norms]
    decay = kwargs.get("weight_decay", 0.0)
    groups = [{"params": others}, {"params": scaled, "lr": kwargs["lr"] * scale, "weight_decay": decay / scale}]
    return cls([g for g in groups if g["params"]], **kwargs)


def optimizer_procedures(settings: Mapping[str, Any]) -> list[Algorithm]:
    """What the optimizer settings add to the run's training (Lookahead), apart from the arm's methods."""
    if "lookahead" not in settings:
        return []
    return [Lookahead(**check_lookahead(settings["lookahead"]))]
