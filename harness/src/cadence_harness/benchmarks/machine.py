"""The machine a benchmark ran on, printed with its numbers: they hold for that machine only."""

from __future__ import annotations

import os
import platform

__all__ = ["cpu_description", "cpu_name"]


def _cpuinfo() -> tuple[str, set[str]]:
    """(CPU model, its flags) from /proc/cpuinfo where there is one; else the platform's name and no flags."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model, flags


def cpu_name() -> str:
    """The CPU model."""
    return _cpuinfo()[0]


def cpu_description() -> str:
    """The CPU model and whether it has AVX-512 (avx512f) and AVX2."""
    model, flags = _cpuinfo()
    capability = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in ("avx512f", "avx2"))
    return f"{model} ({os.cpu_count()} logical CPUs; {capability if flags else 'flags unknown'})"
