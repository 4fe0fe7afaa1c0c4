"""ScaleSchedule meets the contract every cadence method meets.

The contract trains exactly the durations it asks for (two batches, a resume at batch 3 of 6),
so it runs the method at ratio 1; test_algorithm.py resumes a run whose schedule is halved.
"""

from __future__ import annotations

from cadence_scale_schedule import ScaleSchedule

from cadence.testing import MethodConformance


class TestScaleScheduleConformance(MethodConformance):
    def make_algorithm(self) -> ScaleSchedule:
        return ScaleSchedule(ratio=1.0)
