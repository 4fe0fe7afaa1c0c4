"""Process-group helpers for runs launched with ``torchrun`` (one process per device).

cadence has no launcher of its own: ``torchrun --nproc_per_node N train.py`` sets
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``, and the trainer joins the group it describes.
"""

from __future__ import annotations

import atexit
import os
import sys
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

__all__ = [
    "all_gather_object",
    "barrier",
    "broadcast_object",
    "check_parallelism_config",
    "destroy",
    "exit_without_finalization",
    "get_rank",
    "get_world_size",
    "initialize_from_environment",
]


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def initialize_from_environment(device: torch.device, timeout_s: float = 300.0) -> tuple[int, int]:
    """Join the process group described by torchrun's variables; return ``(rank, world_size)``.

    gloo on CPU, NCCL on CUDA. Does nothing outside torchrun or when already initialised.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and dist.is_available() and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
        atexit.register(destroy)  # a group left alive at interpreter exit can abort the process
    return get_rank(), get_world_size()


def check_parallelism_config(value: Any, precision: str | None = None, device: str = "cpu") -> None:
    """Raise the `ValueError`/`TypeError` the `Trainer` would raise for ``parallelism_config=value`` in a run of
    `precision` on `device` ("cpu" or "cuda"), without building anything: a launcher checks every FSDP key
    before it starts N processes that would each refuse it."""
    from cadence._fsdp_config import parse_parallelism_config
    from cadence.precision import Precision

    where = torch.device(device)
    parse_parallelism_config(value, Precision.parse(precision, where), where)


def destroy() -> None:
    """Leave the process group cleanly (barrier, then destroy); safe to call when there is none."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def exit_without_finalization(code: int = 0) -> NoReturn:
    """End a torchrun worker process: run its exit handlers (`destroy` among them, MLflow's, logging's) while the
    interpreter is whole, flush, and leave with `code` without finalising the interpreter.

    Finalisation can abort a worker whose run succeeded: a C++ thread of the distributed stack still owned by a
    Python object is destroyed there ("terminate called without an active exception", SIGABRT; faulthandler shows
    no Python frame; pytorch/pytorch#179291 describes the mechanism). On the project's 2-CPU VM this hit 2 of 15
    two-process harness runs under load. Call it last, from a script that owns its process.
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def local_device(device: torch.device) -> torch.device:
    """On CUDA under torchrun, each process owns the GPU numbered by its local rank."""
    if device.type == "cuda" and device.index is None and get_world_size() > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def all_gather_object(obj: Any) -> list[Any]:
    if get_world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: Any, src: int = 0) -> Any:
    if get_world_size() == 1:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def barrier() -> None:
    if get_world_size() > 1:
        dist.barrier()
