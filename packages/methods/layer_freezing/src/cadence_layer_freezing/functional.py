"""Layer freezing (FreezeOut, Brock et al., 2017; freeze training, Raghu et al., SVCCA 2017): stop training the
earliest layers progressively, removing them from the optimizer. Torch only."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.ops.checks import ArgumentTypeError, check_int, check_number

__all__ = ["check_layer_freezing_args", "freezable_layers", "freeze_first_layers", "freeze_layers", "freeze_schedule"]

Optimizers = torch.optim.Optimizer | Sequence[torch.optim.Optimizer]


def check_layer_freezing_args(freeze_start: float, freeze_level: float) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_number("freeze_start", freeze_start, ge=0, lt=1, hint="the fraction of training before freezing begins")
    check_number("freeze_level", freeze_level, ge=0, le=1, hint="the fraction of layers frozen at the end")


def freeze_schedule(current_duration: float, freeze_start: float = 0.5, freeze_level: float = 1.0) -> float:
    """The fraction of layers to freeze: 0 until `freeze_start`, then linear up to `freeze_level` at the end."""
    if current_duration <= freeze_start:
        return 0.0
    return freeze_level * ((current_duration - freeze_start) / (1.0 - freeze_start))  # Composer's rounding


def freezable_layers(model: nn.Module) -> list[nn.Module]:
    """The modules that own parameters and have no children, in depth-first order (Composer's order).

    A module with children is searched, never frozen itself: parameters it owns directly (next to
    its children) are never frozen.
    """
    if not any(True for _ in model.children()):
        return [model] if any(True for _ in model.parameters()) else []
    return [layer for child in model.children() for layer in freezable_layers(child)]


def _as_list(optimizers: Optimizers | None) -> list[torch.optim.Optimizer]:
    if optimizers is None:
        return []
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    if isinstance(optimizers, Sequence) and all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        return list(optimizers)
    raise ArgumentTypeError(f"`optimizers`={optimizers!r} must be an optimizer or a sequence of optimizers")


def freeze_first_layers(model: nn.Module, optimizers: Optimizers | None, depth: int) -> list[nn.Parameter]:
    """Freeze the first `depth` freezable layers (never the last): ``requires_grad=False``, gradient
    dropped, and each parameter removed from the optimizers' groups together with its state.

    The others keep their places and state. A frozen parameter never returns (the schedule only
    grows), so its optimizer state is released rather than kept. Returns the frozen parameters.
    """
    check_int("depth", depth, ge=0)
    layers = freezable_layers(model)[:-1]
    frozen = [p for layer in layers[:depth] for p in layer.parameters()]
    ids = {id(p) for p in frozen}
    for optimizer in _as_list(optimizers):
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if id(p) not in ids]
        for p in frozen:
            optimizer.state.pop(p, None)  # left behind, it would break optimizer.state_dict()
    for p in frozen:
        p.requires_grad_(False)
        p.grad = None
    return frozen


def freeze_layers(
    model: nn.Module,
    optimizers: Optimizers,
    current_duration: float,
    freeze_start: float = 0.5,
    freeze_level: float = 1.0,
) -> tuple[int, float]:
    """Freeze the earliest layers of `model` by the schedule, in place.

    Early layers settle first (Raghu et al., 2017): once frozen they need no backward pass or
    optimizer step, which makes the rest of training cheaper. The depth is Composer's:
    ``int(freeze_schedule(...) * (n - 1))`` of the `freezable_layers`, the last one never frozen.

    Args:
        model: the network being trained.
        optimizers: the optimizers training it (one or a sequence); frozen parameters leave them.
        current_duration: the elapsed fraction of training, in [0, 1].
        freeze_start: the fraction of training before freezing begins, in [0, 1).
        freeze_level: the fraction of the layers frozen at the end of training, in [0, 1].

    Returns:
        ``(freeze_depth, freeze_percentage)``: how many layers are frozen, and the schedule's fraction.
    """
    check_layer_freezing_args(freeze_start, freeze_level)
    check_number("current_duration", current_duration, ge=0, le=1, hint="the elapsed fraction of training")
    percentage = freeze_schedule(current_duration, freeze_start, freeze_level)
    depth = int(percentage * max(len(freezable_layers(model)) - 1, 0))
    freeze_first_layers(model, optimizers, depth)
    return depth, percentage
