"""Selective Backprop as pure functions: when to select, and which samples to keep by their loss."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cadence.ops.checks import check_int, check_number

__all__ = [
    "check_per_sample_loss",
    "check_per_sample_losses",
    "check_selective_backprop_args",
    "select_indices_using_loss",
    "select_using_loss",
    "should_selective_backprop",
    "takes_reduction",
]

_INTERPOLATION = {3: "linear", 4: "bilinear", 5: "trilinear"}


def check_selective_backprop_args(start: float, end: float, keep: float, scale_factor: float, interrupt: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    _check_window(start, end, interrupt)
    _check_keep_and_scale(keep, scale_factor)


def _check_window(start: float, end: float, interrupt: int, *, fractions: bool = True) -> None:
    for name, value in (("start", start), ("end", end)):
        if fractions:
            check_number(name, value, ge=0, le=1, hint="a fraction of training (a start above 1 would never select)")
        else:
            check_number(name, value, ge=0, hint="in the unit of current_duration")
    if start >= end:
        raise ValueError(f"`start`={start} must be < `end`={end}: Selective Backprop runs while start <= t < end")
    check_int("interrupt", interrupt, ge=0, hint="0: never interrupt")


def should_selective_backprop(
    current_duration: float, batch_idx: int, start: float = 0.5, end: float = 0.9, interrupt: int = 2
) -> bool:
    """True when this batch should be pruned: ``start <= current_duration < end``, except every
    `interrupt`-th batch of the epoch (``(batch_idx + 1) % interrupt == 0``), which trains on the whole
    batch to keep convergence; ``interrupt=0`` never interrupts.

    Args:
        current_duration: elapsed fraction of training (or any other count of progress: the window is
            compared in its unit, as Composer's tests do with epochs, ``start=5, end=15``).
        batch_idx: index of the batch within the epoch.
        start, end: the window, in the unit of `current_duration` (the `SelectiveBackprop` adapter
            takes fractions of training only, in [0, 1]).
        interrupt: period of the full batches inside the window.
    """
    _check_window(start, end, interrupt, fractions=False)
    check_number("current_duration", current_duration, ge=0, hint="the elapsed fraction of training")
    check_int("batch_idx", batch_idx, ge=0)
    in_window = start <= current_duration < end
    return in_window and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)


def select_using_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    model: Callable[[torch.Tensor], Any],
    loss_fun: Callable[..., torch.Tensor],
    keep: float = 0.5,
    scale_factor: float = 1,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(input, target)`` rows `select_indices_using_loss` keeps (the same objects when it keeps all)."""
    kept = select_indices_using_loss(input, target, model, loss_fun, keep, scale_factor, generator=generator)
    if kept.numel() == input.shape[0]:
        return input, target
    return input[kept], target[kept]


def select_indices_using_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    model: Callable[[torch.Tensor], Any],
    loss_fun: Callable[..., torch.Tensor],
    keep: float = 0.5,
    scale_factor: float = 1,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Indices of ``max(1, int(keep * N))`` samples drawn without replacement, favouring high loss.

    Samples the model already gets right teach little, so the backward pass is spent on the
    others (Jiang et al., 2019). One no-grad forward scores every sample; ranked by ascending
    loss, the sample at rank percentile ``p = (rank + 0.5) / N`` is drawn with weight
    ``p ** (1 / keep - 1)`` (uniform when ``keep = 1``). At least one sample is kept: with
    ``int(keep * N) == 0`` (e.g. N = 1) the batch is never emptied. When every sample is kept
    the model is not called and ``arange(N)`` is returned.

    Args:
        input: the batch's inputs, samples first.
        target: the batch's targets, passed to `loss_fun`.
        model: ``model(input) -> outputs``; called under ``torch.no_grad()`` in whatever mode
            (train/eval) it is in: put it in eval mode to keep BatchNorm statistics unchanged.
        loss_fun: ``loss_fun(outputs, target, reduction='none')``, per-sample losses ``(N,)``
            (or ``(N, ...)``, averaged per sample).
        keep: fraction of the batch kept, in (0, 1].
        scale_factor: downsample 3-D to 5-D inputs by this factor (linear/bilinear/trilinear)
            for a cheaper scoring pass, in (0, 1]; the kept samples stay full size.
        generator: draws the samples (the global RNG when None); on the input's device.
    """
    _check_keep_and_scale(keep, scale_factor)
    if scale_factor != 1 and input.ndim not in _INTERPOLATION:
        raise ValueError(f"`scale_factor`={scale_factor} needs a 3-D to 5-D input to downsample, got {input.ndim}-D")
    if not callable(loss_fun) or not takes_reduction(loss_fun):
        raise TypeError(
            "`loss_fun` must take a keyword argument `reduction`. It is called as "
            "loss_fun(outputs, target, reduction='none') and returns one loss per sample"
        )  # Composer's words first: code that matches them keeps working
    num_samples = input.shape[0]
    num_kept = max(1, int(keep * num_samples))
    if num_kept >= num_samples:
        return torch.arange(num_samples, device=input.device)
    with torch.no_grad():
        scored = input
        if scale_factor != 1:
            scored = F.interpolate(input, scale_factor=scale_factor, mode=_INTERPOLATION[input.ndim])
        losses = loss_fun(model(scored), target, reduction="none")
    check_per_sample_losses(losses, num_samples, "`loss_fun`")
    ranked = losses.reshape(num_samples, -1).float().mean(dim=1).argsort()  # ascending loss
    percentile = (torch.arange(num_samples, device=input.device, dtype=torch.float32) + 0.5) / num_samples
    chosen = torch.multinomial(percentile ** (1.0 / keep - 1.0), num_kept, replacement=False, generator=generator)
    return ranked[chosen]


def takes_reduction(function: Callable[..., Any]) -> bool:
    """Whether `function` accepts a ``reduction=`` keyword (named, or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: cannot tell, so trust it
        return True
    return any(p.name == "reduction" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _check_keep_and_scale(keep: float, scale_factor: float) -> None:
    check_number("keep", keep, gt=0, le=1, hint="the fraction of each batch back-propagated")
    check_number("scale_factor", scale_factor, gt=0, le=1, hint="scoring may only downsample")


def check_per_sample_losses(losses: Any, num_samples: int, name: str) -> None:
    """Refuse what `name`(..., reduction='none') returned unless it holds one loss per sample of `num_samples`."""
    if not isinstance(losses, torch.Tensor) or losses.ndim == 0 or losses.shape[0] != num_samples:
        shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
        raise ValueError(f"{name}(..., reduction='none') must return per-sample losses ({num_samples},), got {shape}")


def check_per_sample_loss(model: Any) -> None:
    """Fail before training when `model` cannot give per-sample losses (Composer finds out mid-run).

    Both ``model.loss`` and, when it has one, ``model.loss_fn`` must take ``reduction='none'``.
    """
    loss = getattr(model, "loss", None)
    inner = getattr(model, "loss_fn", None)
    for name, function in ((f"{type(model).__name__}.loss", loss), (f"{type(model).__name__}.loss_fn", inner)):
        if function is not None and not (callable(function) and takes_reduction(function)):
            raise TypeError(
                f"SelectiveBackprop scores each sample with {name}(..., reduction='none'), but {name} takes no "
                "`reduction` argument. Fix: give the loss a `reduction` keyword (e.g. a loss_fn that forwards it "
                "to F.cross_entropy), or drop SelectiveBackprop"
            )
    if loss is None:
        raise TypeError(
            f"SelectiveBackprop needs a cadence Model with loss(outputs, batch), got {type(model).__name__}"
        )
