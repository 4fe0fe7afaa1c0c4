"""Progressive Resizing: train on smaller images first and grow them to full size on a schedule.

`progressive_resizing_scale` is the schedule, `resize_batch` the pure resize/crop, and
`ProgressiveResizing` applies both to every training batch.
"""

from cadence_progressive_resizing.algorithm import ProgressiveResizing
from cadence_progressive_resizing.functional import progressive_resizing_scale, resize_batch

__all__ = ["ProgressiveResizing", "progressive_resizing_scale", "resize_batch"]
