"""Scaling a run's length and its learning-rate schedule by one ratio (Scale Schedule, ``scale_schedule_ratio``).

A ratio of 0.5 trains half the steps with the whole schedule compressed into them: warm-ups,
milestones and decay lengths shrink with the run. The trainer's ``scale_schedule_ratio`` and the
``ScaleSchedule`` method use these functions. cadence schedulers take the ratio when they are
compiled (their ``dur`` times follow the scaled ``max_duration`` by themselves); a torch
``LRScheduler`` has its time constants scaled in place by `scale_scheduler`. Counts are truncated
as Composer truncates them (``int(value * ratio)``), so Composer recipes keep their lengths. Torch only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.optim import lr_scheduler

from cadence.ops.checks import ArgumentTypeError, check_bool, check_number
from cadence.time import Time, TimeUnit

__all__ = ["scale_duration", "scale_scheduler"]


def scale_duration(duration: Time, ratio: float, batches_per_epoch: int | None = None, *, exact: bool = False) -> Time:
    """`duration` times `ratio`, truncated to a whole count of its unit as Composer does (``10ep`` at
    0.75 is ``7ep``, ``100ba`` at 0.333 is ``33ba``). With ``exact=True`` and `batches_per_epoch`
    known, epochs that would not stay whole become batches instead (``10ep`` of 100 batches at 0.75 is
    ``750ba``). A result under one unit is refused, naming the smallest ratio that works."""
    ratio = check_number("ratio", ratio, gt=0, hint="1.0 keeps the run as it is, 0.5 halves it")
    check_bool("exact", exact, "True: epochs that would not stay whole become batches")
    if ratio == 1.0:
        return duration
    given = duration
    whole = float(duration.value * ratio).is_integer()
    if exact and duration.unit is TimeUnit.EPOCH and batches_per_epoch and not whole:
        duration = Time(int(duration.value) * batches_per_epoch, TimeUnit.BATCH)
    scaled = Time(int(duration.value * ratio), duration.unit)
    if scaled.value < 1:
        raise ValueError(
            f"scale_schedule_ratio={ratio!r} scales max_duration={given} to {Time(0, given.unit)}: nothing would "
            f"train; use a ratio >= {1 / duration.value:.3g}"
        )
    return scaled


def _steps(value: int, ratio: float) -> int:
    """Composer's ``int(value * ratio)``, at least 1 (a step size or period of 0 would divide by zero)."""
    return max(1, int(value * ratio))


def scale_scheduler(scheduler: Any, ratio: float) -> Any:
    """Scale the time constants of a torch LR scheduler in place (milestones, step sizes, decay and
    warm-up lengths, cycle lengths) and return it; ``ExponentialLR`` gets ``gamma ** (1 / ratio)``.

    Schedulers defined by a function of the step (``LambdaLR``, ``MultiplicativeLR``) cannot be
    scaled from outside: use a cadence scheduler (``cadence.schedulers``), which takes the ratio.
    """
    ratio = check_number("ratio", ratio, gt=0, hint="1.0 keeps the schedule as it is")
    if isinstance(scheduler, lr_scheduler.MultiStepLR):
        scheduler.milestones = Counter(int(m * ratio) for m in scheduler.milestones.elements())  # Composer's
    elif isinstance(scheduler, lr_scheduler.StepLR):
        scheduler.step_size = _steps(scheduler.step_size, ratio)
    elif isinstance(scheduler, lr_scheduler.CosineAnnealingLR):
        scheduler.T_max = _steps(scheduler.T_max, ratio)
    elif isinstance(scheduler, lr_scheduler.CosineAnnealingWarmRestarts):
        scheduler.T_0, scheduler.T_i = _steps(scheduler.T_0, ratio), _steps(scheduler.T_i, ratio)
    elif isinstance(scheduler, (lr_scheduler.LinearLR, lr_scheduler.ConstantLR, lr_scheduler.PolynomialLR)):
        scheduler.total_iters = _steps(scheduler.total_iters, ratio)
    elif isinstance(scheduler, lr_scheduler.ExponentialLR):
        scheduler.gamma = scheduler.gamma ** (1 / ratio)
    elif isinstance(scheduler, lr_scheduler.OneCycleLR):
        scheduler.total_steps = _steps(scheduler.total_steps, ratio)
        for phase in scheduler._schedule_phases:
            phase["end_step"] = int(phase["end_step"] * ratio)
    elif isinstance(scheduler, lr_scheduler.SequentialLR):
        scheduler._milestones = [_steps(m, ratio) for m in scheduler._milestones]
        for inner in scheduler._schedulers:
            scale_scheduler(inner, ratio)
    elif isinstance(scheduler, lr_scheduler.ChainedScheduler):
        for inner in scheduler._schedulers:
            scale_scheduler(inner, ratio)
    elif ratio != 1.0:
        raise ArgumentTypeError(
            f"scale_schedule_ratio cannot rescale torch LRSchedulers of type {type(scheduler).__name__} (a function "
            "of the step, unknown time constants); use a cadence scheduler (cadence.schedulers), which takes the "
            "ratio, or one of MultiStepLR, StepLR, CosineAnnealingLR, LinearLR, OneCycleLR, ..."
        )
    return scheduler
