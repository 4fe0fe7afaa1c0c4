"""ChannelsLast meets the contract every cadence method meets."""

from __future__ import annotations

from cadence_channels_last import ChannelsLast

from cadence.testing import MethodConformance


class TestChannelsLastConformance(MethodConformance):
    def make_algorithm(self) -> ChannelsLast:
        return ChannelsLast()
