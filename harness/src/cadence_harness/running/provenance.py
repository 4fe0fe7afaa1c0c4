"""Where a run ran: the machine, the software and the commit, logged with every run as params so results are
compared honestly (`cadence_harness.running.run` logs them; a grid compares them with its records')."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

import cadence

__all__ = ["cpu_name", "environment", "environment_on", "git_sha", "machine_on"]


def _git_dirs(folder: Path) -> tuple[Path, Path] | None:
    """(the folder holding HEAD, the one holding refs) of a checkout at `folder`: ``.git`` itself, or for a
    worktree (``.git`` is a file ``gitdir: ...``) its own folder and the main repository's."""
    dot = folder / ".git"
    if dot.is_dir():
        return dot, dot
    if not dot.is_file() or not dot.read_text().startswith("gitdir:"):
        return None
    own = (folder / dot.read_text().split(":", 1)[1].strip()).resolve()
    common = own / "commondir"
    return own, (own / common.read_text().strip()).resolve() if common.is_file() else own


def git_sha(start: Path | None = None) -> str:
    """The commit checked out in the repository holding this file, read from ``.git`` (no git needed)."""
    folder = (start or Path(__file__)).resolve()
    for parent in [folder, *folder.parents]:
        dirs = _git_dirs(parent)
        if dirs is None or not (dirs[0] / "HEAD").is_file():
            continue
        ref = (dirs[0] / "HEAD").read_text().strip()
        if not ref.startswith("ref:"):
            return ref
        name = ref.split(" ", 1)[1]
        loose = dirs[1] / name
        if loose.is_file():
            return loose.read_text().strip()
        packed = dirs[1] / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + name):
                    return line.split(" ", 1)[0]
        return "unknown"
    return "unknown"


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def environment_on(recipe_device: str) -> dict[str, str]:
    """This machine's environment as a run of a recipe with ``device = recipe_device`` ("cpu" or "gpu") records it."""
    return environment(torch.device("cuda" if recipe_device == "gpu" else "cpu"))


def machine_on(recipe_device: str) -> str:
    """This machine as `records.machine_name` spells a run's machine, for a recipe with ``device = recipe_device``:
    what the runs made here would be compared by."""
    from cadence_harness.records import machine_name

    return machine_name(environment_on(recipe_device))


def environment(device: torch.device) -> dict[str, str]:
    """The machine and software a run ran on (logged as params, so results can be compared honestly)."""
    env = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "cpu_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "versions.torch": torch.__version__,
        "versions.cadence": cadence.__version__,
        "versions.cadence_harness": _version("cadence-harness"),
        "git_sha": git_sha(),
    }
    for package in ("torchvision", "timm", "transformers"):
        env[f"versions.{package}"] = _version(package)
    if device.type == "cuda":
        env["versions.cuda"] = str(torch.version.cuda)
        env["cuda_driver"] = _driver_version()
        env["host_cpu"] = _cpu_name()  # a host-bound GPU run's time depends on it (`records.same_machine`)
    env["boot_id"] = _boot_id()
    return env


def _boot_id() -> str:
    """This boot of this machine (Linux's random boot id): runs that share it ran on one machine start, which
    tells a lent machine's sessions apart (the GPU study's same configurations ran 1.3-1.6x slower on some
    starts than on others)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _cpu_name() -> str:
    try:
        return cpu_name(Path("/proc/cpuinfo").read_text())
    except OSError:
        return platform.processor() or platform.machine()


def cpu_name(cpuinfo: str) -> str:
    """The CPU's model name with its family and model numbers, from ``/proc/cpuinfo``'s text.

    A virtual machine's model name is often only the brand ("AMD EPYC"), which hides the generation: the same
    bf16 ResNet-20 run took 0.54x the time on an "AMD EPYC" of family 26 (Zen 5) as on the "AMD EPYC" that
    recorded its baseline, with the same accuracy to the bit. The numbers tell such machines apart, so that
    times recorded on one are never compared with the other's (`cadence_harness.records.same_machine`)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if not line.strip():
            break  # the first processor's block describes them all
        fields.setdefault(key, value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def _driver_version() -> str:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, IndexError):
        return "unknown"
