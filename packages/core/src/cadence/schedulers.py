"""Learning-rate schedules expressed in training time, as in Composer.

A schedule is a callable ``(state, ssr) -> multiplier`` of the base learning rate. It is a
pure function of ``state.timestamp``, so a resumed run lands on exactly the same rate.
Times may be given in ``ba``, ``ep`` or ``dur``; ``ssr`` (the trainer's
``scale_schedule_ratio``) stretches every ``ba``/``ep`` time (truncated to whole batches,
as Composer), and ``dur`` times follow the scaled ``max_duration`` by construction.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from cadence.ops.checks import check_number
from cadence.ops.schedule_scaling import scale_scheduler
from cadence.time import Time, TimeLike, parse_time

if TYPE_CHECKING:
    from cadence.state import State

__all__ = [
    "ConstantScheduler",
    "CosineAnnealingScheduler",
    "CosineAnnealingWithWarmupScheduler",
    "LinearScheduler",
    "LinearWithWarmupScheduler",
    "MultiStepScheduler",
    "MultiStepWithWarmupScheduler",
    "Scheduler",
    "StepScheduler",
    "compile_scheduler",
    "compile_schedulers",
]


def _time(value: TimeLike, name: str) -> Time:
    return parse_time(name, value, default_int_unit="ba")


def _check_fraction(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}={value!r} must be a number in [0, 1]")
    return float(value)


def _multiplier(value: float, name: str) -> float:
    return check_number(name, value, ge=0, hint="it multiplies the optimizer's learning rate")


class Scheduler(ABC):
    """A learning-rate multiplier as a function of training time."""

    @abstractmethod
    def __call__(self, state: State, ssr: float = 1.0) -> float: ...

    @staticmethod
    def batches(state: State, time: Time, ssr: float) -> float:
        """`time` in batches, with ba/ep times stretched by `ssr` and truncated to whole batches as Composer
        does (``int(batches * ssr)``); ``dur`` times follow the (scaled) ``max_duration`` as they are."""
        batches = state.to_batches(time)
        if time.unit.value == "dur" or ssr == 1.0:
            return batches
        return float(int(batches * ssr))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _warmup(state: State, t_warmup: Time, ssr: float) -> float | None:
    """The warm-up multiplier (linear from 0), or None once warm-up is over."""
    warmup = Scheduler.batches(state, t_warmup, ssr)
    if warmup > 0 and state.timestamp.batch < warmup:
        return state.timestamp.batch / warmup
    return None


def _progress(state: State, start: float, end: float) -> float:
    if end <= start:
        return 1.0
    return min(max((state.timestamp.batch - start) / (end - start), 0.0), 1.0)


class ConstantScheduler(Scheduler):
    def __init__(self, alpha: float = 1.0):
        self.alpha = _multiplier(alpha, "alpha")

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        return self.alpha


class LinearScheduler(Scheduler):
    """From `alpha_i` to `alpha_f` linearly over `t_max`, then constant."""

    def __init__(self, alpha_i: float = 1.0, alpha_f: float = 0.0, t_max: TimeLike = "1dur"):
        self.alpha_i, self.alpha_f = _multiplier(alpha_i, "alpha_i"), _multiplier(alpha_f, "alpha_f")
        self.t_max = _time(t_max, "t_max")

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        frac = _progress(state, 0.0, self.batches(state, self.t_max, ssr))
        return self.alpha_i + (self.alpha_f - self.alpha_i) * frac


class CosineAnnealingScheduler(Scheduler):
    """Half a cosine from 1 down to `alpha_f` over `t_max`."""

    def __init__(self, t_max: TimeLike = "1dur", alpha_f: float = 0.0):
        self.t_max, self.alpha_f = _time(t_max, "t_max"), _check_fraction(alpha_f, "alpha_f")

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        frac = _progress(state, 0.0, self.batches(state, self.t_max, ssr))
        return self.alpha_f + (1 - self.alpha_f) * 0.5 * (1 + math.cos(math.pi * frac))


class StepScheduler(Scheduler):
    """Multiply by `gamma` every `step_size`."""

    def __init__(self, step_size: TimeLike, gamma: float = 0.1):
        self.step_size, self.gamma = _time(step_size, "step_size"), check_number("gamma", gamma, gt=0)

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        step = self.batches(state, self.step_size, ssr)
        if step <= 0:
            raise ValueError(f"step_size={self.step_size} is zero batches long")
        return self.gamma ** math.floor(state.timestamp.batch / step)


class MultiStepScheduler(Scheduler):
    """Multiply by `gamma` at each milestone."""

    def __init__(self, milestones: Sequence[TimeLike], gamma: float = 0.1):
        if isinstance(milestones, (str, int, Time)):
            raise TypeError(f"`milestones`={milestones!r} must be a list of times, e.g. ['30ep', '60ep']")
        self.milestones = [_time(m, f"milestones[{i}]") for i, m in enumerate(milestones)]
        self.gamma = check_number("gamma", gamma, gt=0)

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        passed = sum(state.timestamp.batch >= self.batches(state, m, ssr) for m in self.milestones)
        return self.gamma**passed


class LinearWithWarmupScheduler(Scheduler):
    """Linear warm-up from 0 over `t_warmup`, then linear from `alpha_i` to `alpha_f` until `t_max`."""

    def __init__(self, t_warmup: TimeLike, alpha_i: float = 1.0, alpha_f: float = 0.0, t_max: TimeLike = "1dur"):
        self.t_warmup, self.t_max = _time(t_warmup, "t_warmup"), _time(t_max, "t_max")
        self.alpha_i, self.alpha_f = _multiplier(alpha_i, "alpha_i"), _multiplier(alpha_f, "alpha_f")

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        warm = _warmup(state, self.t_warmup, ssr)
        if warm is not None:
            return warm * self.alpha_i
        frac = _progress(state, self.batches(state, self.t_warmup, ssr), self.batches(state, self.t_max, ssr))
        return self.alpha_i + (self.alpha_f - self.alpha_i) * frac


class CosineAnnealingWithWarmupScheduler(Scheduler):
    """Linear warm-up from 0 over `t_warmup`, then half a cosine down to `alpha_f` at `t_max`."""

    def __init__(self, t_warmup: TimeLike, t_max: TimeLike = "1dur", alpha_f: float = 0.0):
        self.t_warmup, self.t_max = _time(t_warmup, "t_warmup"), _time(t_max, "t_max")
        self.alpha_f = _check_fraction(alpha_f, "alpha_f")

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        warm = _warmup(state, self.t_warmup, ssr)
        if warm is not None:
            return warm
        frac = _progress(state, self.batches(state, self.t_warmup, ssr), self.batches(state, self.t_max, ssr))
        return self.alpha_f + (1 - self.alpha_f) * 0.5 * (1 + math.cos(math.pi * frac))


class MultiStepWithWarmupScheduler(Scheduler):
    """Linear warm-up from 0 over `t_warmup`, then multiply by `gamma` at each milestone."""

    def __init__(self, t_warmup: TimeLike, milestones: Sequence[TimeLike], gamma: float = 0.1):
        self.t_warmup = _time(t_warmup, "t_warmup")
        self.steps = MultiStepScheduler(milestones, gamma)

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        warm = _warmup(state, self.t_warmup, ssr)
        return warm if warm is not None else self.steps(state, ssr)


def compile_scheduler(scheduler: Scheduler, state: State, optimizer: Optimizer, ssr: float) -> LambdaLR:
    """A torch scheduler whose every step sets ``lr = base_lr * scheduler(state, ssr)``."""
    return LambdaLR(optimizer, lambda _: scheduler(state, ssr))


def compile_schedulers(schedulers: list[Any], state: State) -> list[tuple[LRScheduler, bool]]:
    """(torch scheduler, steps every batch) pairs for the run, also set as ``state.schedulers``.

    A cadence `Scheduler` becomes one `LambdaLR` per optimizer, stepped every batch, stretched by
    ``state.scale_schedule_ratio``; a torch ``LRScheduler`` is stepped every epoch, its time
    constants scaled by the same ratio (`cadence.ops.schedule_scaling.scale_scheduler`).
    """
    ratio = state.scale_schedule_ratio
    compiled: list[tuple[LRScheduler, bool]] = []
    for scheduler in schedulers:
        if isinstance(scheduler, Scheduler):
            if not state.optimizers:
                raise ValueError("schedulers need optimizers; pass optimizers=...")
            compiled += [
                (compile_scheduler(scheduler, state, optimizer, ratio), True) for optimizer in state.optimizers
            ]
        else:
            compiled.append((scale_scheduler(scheduler, ratio), False))
    state.schedulers = [scheduler for scheduler, _ in compiled]
    return compiled
