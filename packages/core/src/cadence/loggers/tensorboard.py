"""`TensorboardLogger`: scalars and hyperparameters in TensorBoard event files (Composer's destination).

Needs the ``tensorboard`` package (``pip install 'cadence[tensorboard]'``); it is imported when
the first event file is opened, never on ``import cadence``. Files go to
``<log_dir>/<run_name>/events.out.tfevents.*``; point ``tensorboard --logdir <log_dir>`` at them.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cadence.loggers.destination import LoggerDestination
from cadence.ops.checks import check_bool, check_int

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["TensorboardLogger"]


def _scalar(value: Any) -> float | None:
    """`value` as a float when it is one number (a Python number or a one-element tensor), else None."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().cpu().item()) if value.numel() == 1 else None
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _hparam(value: Any) -> bool | int | float | str:
    """TensorBoard's HParams take bools, numbers and strings; anything else is shown as its text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class TensorboardLogger(LoggerDestination):
    """Writes every scalar metric with ``SummaryWriter.add_scalar`` and the hyperparameters as HParams.

    Args:
        log_dir: where the runs' folders go (default ``./tensorboard_logs``).
        flush_interval: write buffered events to disk every this many batches (and at every
            evaluation end, epoch end and the end of the run).
        rank_zero_only: accepted for Composer compatibility; cadence's trainer only logs on rank 0.

    Values that are not one number (strings, tensors of several elements) are not written.
    """

    def __init__(self, log_dir: str | Path | None = None, flush_interval: int = 100, rank_zero_only: bool = True):
        self.log_dir = Path(log_dir) if log_dir is not None else Path("tensorboard_logs")
        self.flush_interval = check_int("flush_interval", flush_interval, ge=1, hint="the default is 100 batches")
        self.rank_zero_only = check_bool("rank_zero_only", rank_zero_only)
        self.run_name = "run"
        self.hyperparameters: dict[str, Any] = {}
        self._writer: Any = None

    @property
    def writer(self) -> Any:
        """The `SummaryWriter`, opened on first use in ``<log_dir>/<run_name>``."""
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise ImportError(
                    "TensorboardLogger needs the tensorboard package: pip install 'cadence[tensorboard]'"
                ) from error
            self._writer = SummaryWriter(log_dir=str(self.log_dir / self.run_name))
        return self._writer

    # The run's name is final once a checkpoint is loaded (it restores the name it was written with)
    def init(self, state: State, logger: Logger) -> None:
        self.run_name = state.run_name

    def after_load(self, state: State, logger: Logger) -> None:
        self.run_name = state.run_name

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in metrics.items():
            number = _scalar(value)
            if number is not None:
                self.writer.add_scalar(name, number, global_step=step)

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Written at once as TensorBoard's HParams session (all the run's parameters so far)."""
        file_writer = self.writer.file_writer  # first: it says how to install tensorboard when it is missing
        from torch.utils.tensorboard.summary import hparams

        self.hyperparameters.update(params)
        clean = {name: _hparam(value) for name, value in self.hyperparameters.items()}
        experiment, session_start, session_end = hparams(clean, {})
        for summary in (experiment, session_start, session_end):
            file_writer.add_summary(summary)

    def batch_end(self, state: State, logger: Logger) -> None:
        if int(state.timestamp.batch) % self.flush_interval == 0:
            self.flush()

    def eval_start(self, state: State, logger: Logger) -> None:
        self.flush()

    def eval_end(self, state: State, logger: Logger) -> None:
        self.flush()

    def epoch_end(self, state: State, logger: Logger) -> None:
        self.flush()

    def fit_end(self, state: State, logger: Logger) -> None:
        self.flush()

    def flush(self, timeout_s: float | None = None) -> bool | None:
        if self._writer is not None:
            self._writer.flush()
        return None

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        self._close()

    def close(self, state: State, logger: Logger) -> None:
        self._close()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
