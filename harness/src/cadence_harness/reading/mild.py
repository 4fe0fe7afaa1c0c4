"""Composer's "Mild" recipe as an arm of a study: the reference every searched recipe is read beside.

Composer's ResNet "mild" recipe (composer/yamls/recipes/resnet50_mild.yaml) trains with BlurPool,
ChannelsLast, EMA, label smoothing and progressive resizing, with decoupled SGDW (and a scale schedule
where a run is shortened). A study runs it as one combination of those methods, less any the baseline
already has (a study whose baseline runs channels_last and smooths its labels runs the other three), at
the study's settings or as variants (``label_smoothing@mild``).
"""

from __future__ import annotations

from collections.abc import Sequence

from cadence_harness.reading.tradeoff import Curve
from cadence_harness.records import arm_methods

__all__ = ["MILD", "MILD_CORE", "mild_curve"]

MILD = frozenset(
    {"blurpool", "channels_last", "ema", "label_smoothing", "progressive_resizing", "decoupled_weight_decay"}
    | {"scale_schedule"}
)
MILD_CORE = frozenset({"blurpool", "ema", "progressive_resizing"})  # what no baseline here already has


def mild_curve(curves: Sequence[Curve]) -> Curve | None:
    """The sweep curve of the study's Mild arm (its methods within `MILD`, `MILD_CORE` among them), or None."""
    for curve in curves:
        methods = set(arm_methods(curve.arm))
        if not curve.cyclic and MILD_CORE <= methods <= MILD:
            return curve
    return None
