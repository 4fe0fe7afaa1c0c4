"""Exponential moving average of a model's weights (Polyak averaging), as pure tensor functions. Torch only.

The averaged weights live in one plain ``{name: tensor}`` dict (`ema_weights`) rather than in a
second module: one copy of the trained parameters and buffers, nothing else. `compute_ema` updates
it, `swap_weights` exchanges it with the model's weights in place (the model, its optimizer state
and every reference to its parameters stay as they are).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from cadence.ops.checks import check_number

__all__ = ["compute_ema", "ema_weights", "smoothing_from_half_life", "swap_weights"]

_CHUNK = 1 << 24  # elements per multi-tensor kernel: the temporary of `compute_ema` stays under 64 MB (fp32)


def smoothing_from_half_life(half_life: float, update_interval: float = 1.0) -> float:
    """The smoothing whose weight on an old value halves every `half_life` (same unit as `update_interval`):
    ``2 ** (-update_interval / half_life)``, Composer's formula."""
    check_number("half_life", half_life, gt=0, hint="e.g. 1000 batches")
    check_number("update_interval", update_interval, gt=0)
    return 2.0 ** (-update_interval / half_life)


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    return itertools.chain(model.named_parameters(), model.named_buffers())


def ema_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of what EMA averages: the parameters that train (``requires_grad``, as in Composer) and every
    buffer, by name, on their own devices. Frozen parameters never change, so they are not copied."""
    with torch.no_grad():
        return {
            name: tensor.detach().clone()
            for name, tensor in _named_tensors(model)
            if not isinstance(tensor, nn.Parameter) or tensor.requires_grad
        }


def _pairs(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(stored, model's) tensor pairs by name; the model's tensors are detached."""
    return [(weights[name], tensor.detach()) for name, tensor in _named_tensors(model) if name in weights]


def _chunks(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Iterator[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """The pairs in groups of at most `_CHUNK` elements (a single larger tensor is a group of its own)."""
    group: list[tuple[torch.Tensor, torch.Tensor]] = []
    size = 0
    for pair in pairs:
        if group and size + pair[0].numel() > _CHUNK:
            yield [a for a, _ in group], [b for _, b in group]
            group, size = [], 0
        group.append(pair)
        size += pair[0].numel()
    if group:
        yield [a for a, _ in group], [b for _, b in group]


def compute_ema(model: nn.Module, ema_model: nn.Module | Mapping[str, torch.Tensor], smoothing: float = 0.99) -> None:
    """Move the averaged weights towards the model's, in place: ``W_ema <- s * W_ema + (1 - s) * W``.

    Composer's update, bit for bit: the two products are rounded separately, then added.
    Floating-point parameters and buffers (BatchNorm running statistics included) are averaged;
    integer buffers (``num_batches_tracked``) are copied, since an average of a counter means nothing.

    Args:
        model: the model being trained (its current weights).
        ema_model: the averaged weights: a module of the same architecture, or a ``{name: tensor}``
            dict such as `ema_weights` returns (matched by parameter and buffer name).
        smoothing: the weight kept by the old average, in [0, 1]: 0 copies the model, 1 keeps the
            average as it is. A half-life of ``h`` updates is ``smoothing = 2 ** (-1 / h)``.
    """
    smoothing = check_number("smoothing", smoothing, ge=0, le=1, hint="0.99 keeps 99% of the average per update")
    stored = dict(_named_tensors(ema_model)) if isinstance(ema_model, nn.Module) else ema_model
    pairs = _pairs(model, stored)
    with torch.no_grad():
        for averages, currents in _chunks([(a, b) for a, b in pairs if a.is_floating_point()]):
            torch._foreach_mul_(averages, smoothing)
            torch._foreach_add_(averages, torch._foreach_mul(currents, 1.0 - smoothing))
        for averaged, current in pairs:
            if not averaged.is_floating_point():
                averaged.copy_(current)


def swap_weights(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Exchange the model's parameters and buffers with `weights` (by name), in place.

    Values are copied, never rebound: the parameters stay the same objects (optimizers, DDP and
    compiled graphs keep pointing at them). Calling it twice restores both sides exactly. A
    temporary of at most 64 MB (fp32) is used, never a second copy of the model.
    """
    with torch.no_grad():
        for stored, current in _chunks(_pairs(model, weights)):
            held = [tensor.clone() for tensor in current]
            torch._foreach_copy_(current, stored)
            torch._foreach_copy_(stored, held)
