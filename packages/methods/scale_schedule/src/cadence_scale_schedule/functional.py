"""Scale Schedule as functions: a run's length and its learning-rate schedule scaled by one ratio.

These are the very functions behind ``Trainer(scale_schedule_ratio=...)`` (they live in
`cadence.ops.schedule_scaling`): `scale_duration` for ``max_duration`` and `scale_scheduler` for
a torch LR scheduler's time constants, in place. cadence schedulers need neither: they take the
ratio when the trainer compiles them. Torch only.
"""

from __future__ import annotations

from cadence.ops.checks import check_number
from cadence.ops.schedule_scaling import scale_duration as scale_duration
from cadence.ops.schedule_scaling import scale_scheduler as scale_scheduler

__all__ = ["check_scale_schedule_args", "scale_duration", "scale_scheduler"]


def check_scale_schedule_args(ratio: float) -> float:
    """`ratio` as a float > 0, or a ValueError/TypeError naming it."""
    return check_number("ratio", ratio, gt=0, hint="0.5 halves the run and its schedule, 2.0 doubles them")
