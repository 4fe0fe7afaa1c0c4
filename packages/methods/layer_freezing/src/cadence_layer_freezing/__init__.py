"""Layer Freezing (FreezeOut, Freeze Training): freeze the earliest layers progressively during training.

`freeze_layers` freezes by the schedule in your own loop; `LayerFreezing` does it for `cadence.Trainer`
and resumes exactly from checkpoints written after some layers froze.
"""

from cadence_layer_freezing.algorithm import LayerFreezing
from cadence_layer_freezing.functional import freezable_layers, freeze_first_layers, freeze_layers, freeze_schedule

__all__ = ["LayerFreezing", "freezable_layers", "freeze_first_layers", "freeze_layers", "freeze_schedule"]
