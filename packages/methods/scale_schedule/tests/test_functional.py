"""The functional API is the trainer's own scaling code (cadence.ops.schedule_scaling)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from cadence_scale_schedule import check_scale_schedule_args, scale_duration, scale_scheduler

import cadence.ops.schedule_scaling as core
from cadence import Time


def test_the_functions_are_the_trainers() -> None:
    assert scale_duration is core.scale_duration and scale_scheduler is core.scale_scheduler


@pytest.mark.parametrize(
    ("duration", "ratio", "per_epoch", "expected"),
    [("10ep", 0.5, 4, "5ep"), ("10ep", 0.75, 100, "7ep"), ("3ep", 0.5, 4, "1ep"), ("100ba", 0.333, None, "33ba")],
)
def test_scale_duration_truncates_as_composer(duration: str, ratio: float, per_epoch: int | None, expected: str):
    assert scale_duration(Time.from_timestring(duration), ratio, per_epoch) == Time.from_timestring(expected)


def test_exact_scaling_turns_epochs_that_would_not_stay_whole_into_batches() -> None:
    assert scale_duration(Time.from_timestring("10ep"), 0.75, 100, exact=True) == Time.from_timestring("750ba")
    assert scale_duration(Time.from_timestring("10ep"), 0.5, 100, exact=True) == Time.from_timestring("5ep")
    with pytest.raises(TypeError, match="`exact`"):
        scale_duration(Time.from_timestring("10ep"), 0.5, 100, exact="yes")  # type: ignore[arg-type]


def test_a_duration_scaled_below_one_unit_is_refused_naming_the_smallest_ratio() -> None:
    with pytest.raises(ValueError, match=r"use a ratio >= 0\.25"):
        scale_duration(Time.from_timestring("4ba"), 0.1)


def test_scale_scheduler_scales_torch_milestones_in_place() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    multistep = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60, 80])
    assert scale_scheduler(multistep, 0.5) is multistep
    assert multistep.milestones == Counter({15: 1, 30: 1, 40: 1})
    assert scale_scheduler(torch.optim.lr_scheduler.MultiStepLR(optimizer, [30, 50]), 0.75).milestones == Counter(
        {22: 1, 37: 1}
    )  # Composer's int(m * ratio): 22.5 -> 22, 37.5 -> 37
    assert scale_scheduler(torch.optim.lr_scheduler.MultiStepLR(optimizer, [2, 3]), 0.4).milestones == Counter(
        {0: 1, 1: 1}
    )
    step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    assert scale_scheduler(step, 0.75).step_size == 2  # int(2.25)
    assert scale_scheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=3), 0.25).step_size == 1  # not 0
    lambda_lr = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step)
    with pytest.raises(TypeError, match="LambdaLR"):
        scale_scheduler(lambda_lr, 0.5)


@pytest.mark.parametrize("ratio", [0, -0.5, float("inf"), float("nan"), True, "0.5", None])
def test_bad_ratio_is_refused_naming_it(ratio: object) -> None:
    with pytest.raises(ValueError, match="`ratio`"):
        check_scale_schedule_args(ratio)  # type: ignore[arg-type]
