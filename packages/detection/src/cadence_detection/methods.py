"""Which speed-up methods work on a detector, and the refusal of those that do not, before training starts.

A method that changes images without moving the boxes with them (resizing, geometric augmentation, mixing
two images) or that reads class targets would train on wrong targets without a word. `DetectionMethodCheck`
declares a conflict with each of them (`cadence.Effects.conflicts`), so the engine refuses the combination when
the Trainer is built, naming the method and why; `check_methods` does the same for a list of methods.
`DetectionModel.training_procedures` returns the check, and the harness adds it to every detection run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cadence import Algorithm, Effects, Event, State
from cadence.algorithm import NotApplicableError

__all__ = ["REFUSED", "SUPPORTED", "DetectionMethodCheck", "check_methods"]

# Tested on a detector in cadence_detection's tests (training steps with each).
SUPPORTED = {
    "ChannelsLast": "converts the weights; the detector's transform batches the images afresh",
    "EMA": "averages weights; evaluation uses the average",
    "GradientClipping": "clips the summed loss's gradients",
    "BlurPool": "blurs the strided convolutions and max-pool of the backbone (the FPN and heads have none)",
}

_BOXES_STAY = "boxes are not moved with the pixels, so the targets would be wrong"
REFUSED = {
    "MixUp": "it blends images and their class targets; detection targets are boxes (box-level mixing is not "
    "implemented)",
    "CutMix": f"it pastes a patch of another image and mixes class targets; {_BOXES_STAY}",
    "LabelSmoothing": "it smooths class-label targets; a detector computes its classification loss itself",
    "ProgressiveResizing": f"it resizes the images but not their box targets; {_BOXES_STAY} (set the detector's "
    "min_size/max_size to train at a smaller size instead)",
    "RandAugment": f"its geometric operations (shear, translate, rotate) move objects; {_BOXES_STAY}",
    "AugMix": f"its geometric operations (shear, translate, rotate) move objects; {_BOXES_STAY}",
    "ColOut": f"it drops rows and columns of pixels; {_BOXES_STAY}",
    "SelectiveBackprop": "it needs a per-sample loss of (input, target) pairs; a detector returns one loss dict per "
    "batch",
    "Alibi": "it is for transformer language models",
    "GatedLinearUnits": "it is for transformer language models",
    "SeqLengthWarmup": "it is for token sequences",
    "LowPrecisionLayerNorm": "torchvision's detectors have no LayerNorm",
    "GyroDropout": "torchvision's detectors have no Dropout to replace",
}


def _reason(name: str) -> str:
    return f"{name} does not apply to detection: {REFUSED[name]}; leave {name} out of a detection run"


def check_methods(algorithms: Iterable[Any]) -> None:
    """Raise `NotApplicableError` naming the first method of `algorithms` that cannot train a detector, and why."""
    for algorithm in algorithms:
        name = getattr(algorithm, "name", type(algorithm).__name__)
        if name in REFUSED:
            raise NotApplicableError(_reason(name))


class DetectionMethodCheck(Algorithm):
    """Runs nothing; declares a conflict with every method in `REFUSED`, so the engine refuses them up front."""

    def match(self, event: Event, state: State) -> bool:
        del event, state
        return False

    def apply(self, event: Event, state: State, logger: Any) -> None:
        del event, state, logger

    def effects(self) -> Effects:
        return Effects(conflicts={name: _reason(name) for name in REFUSED})
