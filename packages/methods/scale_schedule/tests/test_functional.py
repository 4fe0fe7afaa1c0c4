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
    [("10ep", 0.5, 4, "5ep"), ("3ep", 0.5, 4, "6ba"), ("100ba", 0.25, None, "25ba"), ("4ep", 2.0, None, "8ep")],
)
def test_scale_duration(duration: str, ratio: float, per_epoch: int | None, expected: str) -> None:
    assert scale_duration(Time.from_timestring(duration), ratio, per_epoch) == Time.from_timestring(expected)


def test_a_duration_scaled_below_one_unit_is_refused_naming_the_smallest_ratio() -> None:
    with pytest.raises(ValueError, match=r"use a ratio >= 0\.25"):
        scale_duration(Time.from_timestring("4ba"), 0.1)


def test_scale_scheduler_scales_torch_milestones_in_place() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    multistep = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60, 80])
    assert scale_scheduler(multistep, 0.5) is multistep
    assert multistep.milestones == Counter({15: 1, 30: 1, 40: 1})
    lambda_lr = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step)
    with pytest.raises(TypeError, match="LambdaLR"):
        scale_scheduler(lambda_lr, 0.5)


@pytest.mark.parametrize("ratio", [0, -0.5, float("inf"), float("nan"), True, "0.5", None])
def test_bad_ratio_is_refused_naming_it(ratio: object) -> None:
    with pytest.raises(ValueError, match="`ratio`"):
        check_scale_schedule_args(ratio)  # type: ignore[arg-type]
