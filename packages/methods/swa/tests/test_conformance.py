"""SWA meets the contract every cadence method meets (the mid-epoch resume lands inside the averaging window)."""

from __future__ import annotations

from cadence_swa import SWA

from cadence.testing import MethodConformance


class TestSWAConformance(MethodConformance):
    def make_algorithm(self) -> SWA:
        # 6-batch resume test: averages from batch 2, replaces at batch 5; the checkpoint at batch 3 is inside
        return SWA(swa_start="0.3dur", swa_end="0.8dur", update_interval="1ba", schedule_swa_lr=True, swa_lr=0.01)
