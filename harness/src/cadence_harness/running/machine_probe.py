"""What the machine was doing during a run: the host's load and, on a GPU, its clocks, temperature and power.

The training time of one configuration varies across seeds by far more on a GPU than its evaluation time
does (harness/measurements/2026-11-26-h200-study-seeds-1-2.md): a loop near host-bound slows with a busy
host, while a throttled device would slow evaluation too. These readings let a record say which it was.
Each is read outside the timed region (at evaluations and at the end of fit) and never synchronises the
device: NVML answers from the driver. Without NVML (the ``nvidia-ml-py`` package) the GPU readings are absent.

On a GPU the training loop can be host-bound: then its time follows how fast the host runs the same
instructions, which a shared VM changes from run to run (one H200 start: the training thread's CPU time for
identical work moved by 8 % between seeds and training time followed it, r = 0.99;
harness/measurements/2026-11-28-h200-timing.md). Two readings say how fast the host was: the time a fixed
piece of pure-Python work takes at each reading (``final/host_speed_us``, the median; lower is faster), and
the share of the host's CPU time the hypervisor gave to other guests over the fit (``final/host_steal_frac``,
from ``/proc/stat``; Linux only).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["MachineProbe", "host_load", "host_speed_us", "steal_ticks"]

SPEED_WORK = 2_000  # loop iterations timed by `host_speed_us`: about 30-100 us of one core per repeat
SPEED_UNIT = 20_000  # iterations the reading is given for (the work timed until 2026-11-28: records compare)


def host_load() -> float:
    """The 1-minute load average over the number of logical CPUs (1.0: every CPU busy); -1 where unknown."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # not on every platform
        return -1.0


def host_speed_us(repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Microseconds `SPEED_UNIT` iterations of a fixed pure-Python loop take on this thread (the best of
    `repeats` timings of `SPEED_WORK`, scaled): the interpreter's speed on this host right now, which is what a
    host-bound training step runs at. It costs about 0.1 ms per repeat (20,000 iterations timed 3 times, until
    2026-11-28, cost 2.6 ms: 40 us per step of harness_step's run, which reads it at each evaluation; since
    2026-11-29 an evaluation's reading is one repeat)."""
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        total = 0
        for i in range(SPEED_WORK):
            total += i & 7
        best = min(best, clock() - start)
    return best * 1e6 * SPEED_UNIT / SPEED_WORK


def steal_ticks(stat_path: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) clock ticks of all CPUs since boot from the ``cpu`` line of /proc/stat (user nice system
    idle iowait irq softirq steal ...); None where there is no such file (not Linux) or no steal column."""
    try:
        with open(stat_path) as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]  # guest time is already inside user time
    return ticks[7], sum(ticks)


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
    speeds_us: list[float] = field(default_factory=list)
    steal_at_start: tuple[int, int] | None = None
    steal_at_end: tuple[int, int] | None = None

    def start(self) -> None:
        """At the fit's start, before its clocks: where the host's steal counter stands."""
        self.steal_at_start = steal_ticks()

    def read(self, speed_repeats: int = 5) -> None:
        """The readings now; the host's speed as the best of `speed_repeats` timings (1 at each evaluation, where the
        readings' median guards against a preempted one; 5 at the end, which may be the only reading)."""
        self.loads.append(host_load())
        self.speeds_us.append(host_speed_us(speed_repeats))
        if self.steal_at_start is not None:
            self.steal_at_end = steal_ticks()
        if self.device.type == "cuda":
            reading = _gpu_reading(self.device)
            if reading is not None:
                self.gpu.append(reading)

    def summary(self) -> dict[str, float]:
        """``host_load`` (the highest reading: a busy stretch is what slows a run), the host's speed (median) and
        steal share over the fit, and on a GPU the lowest SM clock, the highest temperature and the mean power."""
        out: dict[str, float] = {}
        loads = [load for load in self.loads if load >= 0]
        if loads:
            out["final/host_load"] = max(loads)
        if self.speeds_us:
            out["final/host_speed_us"] = statistics.median(self.speeds_us)
        if self.steal_at_start is not None and self.steal_at_end is not None:
            steal = self.steal_at_end[0] - self.steal_at_start[0]
            total = self.steal_at_end[1] - self.steal_at_start[1]
            if total > 0:
                out["final/host_steal_frac"] = steal / total
        if self.gpu:
            clocks, temperatures, powers = zip(*self.gpu)
            out["final/gpu_sm_clock_min_mhz"] = min(clocks)
            out["final/gpu_temperature_max_c"] = max(temperatures)
            out["final/gpu_power_mean_w"] = sum(powers) / len(powers)
        return out
