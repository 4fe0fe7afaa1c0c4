"""ProgressiveResizing meets the contract every cadence method meets, in both modes."""

from __future__ import annotations

import torch
from cadence_progressive_resizing import ProgressiveResizing, resize_batch

from cadence.testing import MethodConformance


class TestProgressiveResizingConformance(MethodConformance):
    functional_preserves_shape = False

    def make_algorithm(self) -> ProgressiveResizing:
        return ProgressiveResizing()

    def functional_calls(self):
        generator = torch.Generator().manual_seed(0)
        return {
            "resize_batch": lambda x, y: resize_batch(x, y, 0.5)[0],
            "resize_batch(mode='crop')": lambda x, y: resize_batch(x, y, 0.75, mode="crop", generator=generator)[0],
        }


class TestProgressiveResizingCropConformance(TestProgressiveResizingConformance):
    def make_algorithm(self) -> ProgressiveResizing:
        return ProgressiveResizing(mode="crop", initial_scale=0.25, delay_fraction=0.0)
