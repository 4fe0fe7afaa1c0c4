"""What the machine was doing during a run: the host's load and, on a GPU, its clocks, temperature and power.

The training time of one configuration varies across seeds by far more on a GPU than its evaluation time
does (harness/measurements/2026-11-26-h200-study-seeds-1-2.md): a loop near host-bound slows with a busy
host, while a throttled device would slow evaluation too. These readings let a record say which it was.
Each is read outside the timed region (at evaluations and at the end of fit) and never synchronises the
device: NVML answers from the driver. Without NVML (the ``nvidia-ml-py`` package) the GPU readings are absent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

__all__ = ["MachineProbe", "host_load"]


def host_load() -> float:
    """The 1-minute load average over the number of logical CPUs (1.0: every CPU busy); -1 where unknown."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # not on every platform
        return -1.0


def _gpu_reading(device: torch.device) -> tuple[float, float, float] | None:
    """(SM clock MHz, temperature C, power W) from NVML, or None where NVML is not there."""
    try:
        return (
            float(torch.cuda.clock_rate(device)),
            float(torch.cuda.temperature(device)),
            float(torch.cuda.power_draw(device)) / 1000,  # milliwatts
        )
    except Exception:  # ModuleNotFoundError without pynvml, NVML errors on virtualised devices: no reading
        return None


@dataclass
class MachineProbe:
    """Readings taken at chosen moments of a run; `summary` gives the ``final/*`` metrics they make."""

    device: torch.device
    loads: list[float] = field(default_factory=list)
    gpu: list[tuple[float, float, float]] = field(default_factory=list)

    def read(self) -> None:
        self.loads.append(host_load())
        if self.device.type == "cuda":
            reading = _gpu_reading(self.device)
            if reading is not None:
                self.gpu.append(reading)

    def summary(self) -> dict[str, float]:
        """``host_load`` (the highest reading: a busy stretch is what slows a run), and on a GPU the lowest SM
        clock, the highest temperature and the mean power of the readings."""
        out: dict[str, float] = {}
        loads = [load for load in self.loads if load >= 0]
        if loads:
            out["final/host_load"] = max(loads)
        if self.gpu:
            clocks, temperatures, powers = zip(*self.gpu)
            out["final/gpu_sm_clock_min_mhz"] = min(clocks)
            out["final/gpu_temperature_max_c"] = max(temperatures)
            out["final/gpu_power_mean_w"] = sum(powers) / len(powers)
        return out
