"""``device_train_microbatch_size="auto"``: find the largest microbatch that fits in GPU memory.

The first batches run whole; a CUDA out-of-memory error halves the microbatch size, frees the
cache, clears the partial gradients and runs the same batch again, until it fits (or a microbatch
of one sample does not, which is raised with what was tried). The size found stays for the run,
is logged as ``trainer/device_train_microbatch_size`` and is kept in ``state``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from cadence.loggers.logger import Logger
from cadence.state import State

__all__ = ["MicrobatchSearch", "is_out_of_memory"]

T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """A CUDA allocation failure (torch raises `torch.cuda.OutOfMemoryError`, older builds a RuntimeError)."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "CUDA out of memory" in str(error)
    )


class MicrobatchSearch:
    """Runs a batch's forward and backward, halving ``state.device_train_microbatch_size`` on OOM."""

    def __init__(self, state: State, logger: Logger):
        self.state, self.logger = state, logger
        self.tried: list[int] = []

    def run(self, step: Callable[[], T], batch_size: int) -> T:
        state = self.state
        while True:
            size = state.device_train_microbatch_size or batch_size
            try:
                return step()
            except RuntimeError as error:  # torch.cuda.OutOfMemoryError is one
                if not is_out_of_memory(error):
                    raise
                self.tried.append(size)
                if size <= 1:
                    raise RuntimeError(
                        f"device_train_microbatch_size='auto': even a microbatch of 1 sample does not fit in GPU "
                        f"memory (tried {self.tried}); use a smaller model, precision='amp_bf16', or a larger GPU"
                    ) from error
            for optimizer in state.optimizers:  # the partial gradients of the failed attempt
                optimizer.zero_grad(set_to_none=True)
            state.outputs = state.loss = None
            torch.cuda.empty_cache()
            state.device_train_microbatch_size = (size + 1) // 2
            self.logger.log_metrics({"trainer/device_train_microbatch_size": state.device_train_microbatch_size})
