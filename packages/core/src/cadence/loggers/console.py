"""`ConsoleLogger`: a progress bar over the run's batches, and eval results as lines.

Uses tqdm when it is installed (``pip install cadence[progress]``), plain lines otherwise.
The training loss shown in the bar is read back from the device at most twice a second,
so the bar adds no per-step synchronisation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

import torch

from cadence.loggers.destination import LoggerDestination

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["ConsoleLogger"]

_REFRESH_S = 0.5


def _fmt(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = value.detach().float().cpu().item()
    return f"{value:.4f}" if isinstance(value, float) else str(value)


class ConsoleLogger(LoggerDestination):
    def __init__(self, progress_bar: bool = True, stream: IO[str] | None = None):
        self.progress_bar = progress_bar
        self.stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._last_loss: Any = None
        self._last_refresh = 0.0

    def _write(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def fit_start(self, state: State, logger: Logger) -> None:
        if not self.progress_bar:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(
            total=state.max_batches,
            initial=state.timestamp.batch,
            unit="ba",
            desc=state.run_name,
            file=self.stream,
            dynamic_ncols=True,
            leave=True,
        )

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        if "loss/train/total" in metrics:
            self._last_loss = metrics["loss/train/total"]
        shown = {k: v for k, v in metrics.items() if k.startswith("metrics/eval/")}
        if shown:
            body = "  ".join(f"{k.removeprefix('metrics/eval/')}={_fmt(v)}" for k, v in shown.items())
            self._write(f"[eval @ batch {step}] {body}")

    def batch_end(self, state: State, logger: Logger) -> None:
        if self._bar is None:
            return
        self._bar.update(1)
        now = time.monotonic()
        if self._last_loss is not None and now - self._last_refresh > _REFRESH_S:
            self._last_refresh = now
            self._bar.set_postfix(epoch=state.timestamp.epoch, loss=_fmt(self._last_loss), refresh=False)

    def epoch_end(self, state: State, logger: Logger) -> None:
        if self._bar is None and self._last_loss is not None:
            self._write(f"[epoch {state.timestamp.epoch}] batch {state.timestamp.batch} loss={_fmt(self._last_loss)}")

    def close(self, state: State, logger: Logger) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
