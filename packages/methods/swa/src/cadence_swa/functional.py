"""Stochastic Weight Averaging (Izmailov et al., 2018) as pure tensor functions. Torch only.

SWA averages the weights sampled along the end of training with equal weights, loads the average
into the model, and recomputes the BatchNorm statistics for it on the training data (the running
statistics of the sampled models say nothing about the averaged one). These are the pieces of
`torch.optim.swa_utils` (``AveragedModel``, ``SWALR``, ``update_bn``) as functions of plain
``{name: tensor}`` weights and any batch format, so that the averaged copy is the only one kept.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.hooks import RemovableHandle

from cadence.ops.checks import check_bool, check_choice, check_int, check_number

__all__ = [
    "average_weights",
    "check_swa_args",
    "load_weights",
    "recompute_bn_statistics",
    "swa_learning_rate",
    "swa_weights",
    "training_batches",
    "use_learning_rates",
]

_STRATEGIES = {"linear": "linear", "lin": "linear", "cos": "cos", "cosine": "cos"}


def check_swa_args(schedule_swa_lr: bool, anneal_strategy: str, anneal_steps: int, swa_lr: float | None) -> str:
    """Refuse hyperparameters that cannot work, naming them; returns the strategy as ``'linear'`` or ``'cos'``.

    Args:
        schedule_swa_lr: anneal the learning rate to `swa_lr` inside the averaging window.
        anneal_strategy: ``'linear'`` (or ``'lin'``) or ``'cos'`` (or ``'cosine'``), as Composer accepts.
        anneal_steps: the number of averaging updates over which the rate anneals (at least 1).
        swa_lr: the rate annealed to; None keeps the rate the window started with (Composer's behaviour).
    """
    check_bool("schedule_swa_lr", schedule_swa_lr)
    strategy = check_choice("anneal_strategy", anneal_strategy, _STRATEGIES)
    check_int("anneal_steps", anneal_steps, ge=1, hint="the number of averaging updates the annealing takes")
    if swa_lr is not None:
        check_number("swa_lr", swa_lr, ge=0, hint="the learning rate annealed to, e.g. 0.05")
        if not schedule_swa_lr:
            raise ValueError(f"`swa_lr`={swa_lr!r} takes effect only with `schedule_swa_lr`=True: pass both or neither")
    return _STRATEGIES[strategy]


def swa_learning_rate(
    initial_lr: float, swa_lr: float | None, num_updates: int, anneal_steps: int = 10, anneal_strategy: str = "linear"
) -> float:
    """The learning rate after `num_updates` averaging updates: `torch.optim.swa_utils.SWALR` in closed form.

    ``lr = swa_lr * a + initial_lr * (1 - a)`` with ``a = f(min(1, num_updates / anneal_steps))``,
    ``f(t) = t`` (linear) or ``(1 - cos(pi t)) / 2`` (cos). A pure function of the count, so it
    resumes exactly and leaves any other scheduler's state alone. `swa_lr` None keeps `initial_lr`.
    """
    if swa_lr is None:
        return initial_lr
    t = min(1.0, max(0.0, num_updates / max(1, anneal_steps)))
    alpha = t if _STRATEGIES[anneal_strategy] == "linear" else (1 - math.cos(math.pi * t)) / 2
    return swa_lr * alpha + initial_lr * (1 - alpha)


def use_learning_rates(
    optimizer: torch.optim.Optimizer, rates: Callable[[], Sequence[float] | None]
) -> list[RemovableHandle]:
    """Make each ``optimizer.step()`` use ``rates()`` (one per parameter group; None: the groups' own rates) and
    put the groups' rates back right after it, through step pre- and post-hooks: learning-rate schedulers
    never see these rates and continue exactly as without them. Returns the hooks' handles (``.remove()``)."""
    held: list[float] = []

    def before(optimizer: torch.optim.Optimizer, *args: Any) -> None:
        wanted = rates()
        if wanted is not None:
            held[:] = [group["lr"] for group in optimizer.param_groups]
            for group, lr in zip(optimizer.param_groups, wanted):
                group["lr"] = lr

    def after(optimizer: torch.optim.Optimizer, *args: Any) -> None:
        for group, lr in zip(optimizer.param_groups, held):
            group["lr"] = lr
        held.clear()

    return [optimizer.register_step_pre_hook(before), optimizer.register_step_post_hook(after)]


def swa_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of what SWA averages: the trainable floating-point parameters, by name (the first sample).
    Buffers are not averaged: BatchNorm statistics are recomputed (`recompute_bn_statistics`)."""
    with torch.no_grad():
        return {
            name: param.detach().clone()
            for name, param in model.named_parameters()
            if param.requires_grad and param.is_floating_point()
        }


def average_weights(averaged: Mapping[str, torch.Tensor], model: nn.Module, num_averaged: int) -> None:
    """Add the model's weights to an average of `num_averaged` samples, in place: ``avg += (w - avg) / (n + 1)``.

    `torch.optim.swa_utils.AveragedModel`'s multi-tensor update (a lerp by ``1 / (n + 1)``): every
    sample ends up with the same weight ``1 / (n + 1)``.
    """
    check_int("num_averaged", num_averaged, ge=1, hint="the first sample is the copy `swa_weights` makes")
    pairs = [(averaged[name], p.detach()) for name, p in model.named_parameters() if name in averaged]
    if pairs:
        with torch.no_grad():
            torch._foreach_lerp_([a for a, _ in pairs], [p for _, p in pairs], 1.0 / (num_averaged + 1))


def load_weights(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy `weights` into the model's parameters of the same names, in place (parameters stay the same objects)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in weights:
                param.copy_(weights[name])


def recompute_bn_statistics(
    model: nn.Module, batches: Iterable[Any], forward: Callable[[Any], Any] | None = None
) -> int:
    """`torch.optim.swa_utils.update_bn` for any batch format: the BatchNorm running statistics of `model`
    recomputed from scratch as the plain average over `batches` (momentum None), without gradients.

    Each item of `batches` is passed to `forward` (default: ``model``); dropout and other modules run in
    training mode, as in ``update_bn``. Under `torch.distributed`, the statistics are then averaged over
    the ranks, which saw different shards. Returns the number of batches seen (0 without BatchNorm).
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return 0
    momenta, was_training, seen = [m.momentum for m in norms], model.training, 0
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: every batch weighs the same
    model.train()
    try:
        with torch.no_grad():
            for batch in batches:
                (forward or model)(batch)
                seen += 1
    finally:
        for norm, momentum in zip(norms, momenta):
            norm.momentum = momentum
        model.train(was_training)
    if not seen:
        raise ValueError("`batches` yielded nothing: the BatchNorm statistics cannot be recomputed")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size()
        # cast: the norms track running statistics, so they hold them
        statistics = [cast(torch.Tensor, s) for norm in norms for s in (norm.running_mean, norm.running_var)]
        for statistic in statistics:
            torch.distributed.all_reduce(statistic)
            statistic.div_(world)
    return seen


def _map(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`fn` applied to every tensor of a (nested) tuple, list or dict batch."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {key: _map(value, fn) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_map(value, fn) for value in batch)
    return batch


def _replay(loader: Iterable[Any], epoch: int) -> Iterable[Any]:
    """A whole epoch `epoch` of a DataLoader's data in its order, through a copy that shares no iteration state
    with `loader` (its sampler's position, persistent workers, the generators): the trainer's own pass
    continues undisturbed, and a resumed run replays exactly what the uninterrupted one did."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset) or not loader.batch_size:
        return loader
    sampler = copy.copy(loader.sampler)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)  # also rewinds a sampler that skipped the batches a resumed run had trained
    return DataLoader(
        loader.dataset, batch_size=loader.batch_size, sampler=sampler, num_workers=loader.num_workers,
        collate_fn=loader.collate_fn, drop_last=loader.drop_last, generator=torch.Generator().manual_seed(epoch),
    )  # fmt: skip


def _num_samples(batch: Any) -> int:
    """The leading dimension of the batch's first tensor (0 without one)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.ndim else 0
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    return next((n for n in map(_num_samples, values) if n), 0)


def _rows(tensor: torch.Tensor, begin: int, end: int, samples: int) -> torch.Tensor:
    return tensor[begin:end] if tensor.ndim and tensor.shape[0] == samples else tensor


def training_batches(
    loader: Iterable[Any], epoch: int, device: torch.device, microbatch_size: int | None = None
) -> Iterator[Any]:
    """The batches of epoch `epoch` of `loader` (replayed, see `_replay`) on `device`, split into
    microbatches of `microbatch_size` samples (the batch's tensors sharing its leading dimension)."""
    for batch in _replay(loader, epoch):
        batch = _map(batch, lambda tensor: tensor.to(device))
        samples = _num_samples(batch)
        step = microbatch_size or samples or 1
        for begin in range(0, max(samples, 1), step):
            yield _map(batch, functools.partial(_rows, begin=begin, end=begin + step, samples=samples))
