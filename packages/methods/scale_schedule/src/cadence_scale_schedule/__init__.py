"""Scale Schedule for cadence: train for a fraction of the run with the whole schedule compressed.

Budgeted training (Li, Yumer and Ramanan, "Budgeted Training: Rethinking Deep Neural Network
Training Under Resource Constraints", ICLR 2020): the learning-rate schedule, not the number of
steps, decides where training ends up. `scale_duration` and `scale_scheduler` are the functions
for your own loop; `ScaleSchedule` is the method for `cadence.Trainer`.
"""

from cadence_scale_schedule.algorithm import ScaleSchedule as ScaleSchedule
from cadence_scale_schedule.functional import check_scale_schedule_args as check_scale_schedule_args
from cadence_scale_schedule.functional import scale_duration as scale_duration
from cadence_scale_schedule.functional import scale_scheduler as scale_scheduler

__all__ = ["ScaleSchedule", "check_scale_schedule_args", "scale_duration", "scale_scheduler"]
