"""SIGTERM as an exception, so that the trainer can record a terminated run as KILLED.

Schedulers, ``torchrun`` and ``kill`` stop a process with SIGTERM; by default Python dies at once
and nothing records how the run ended. While `sigterm_raises` is active, SIGTERM raises
`RunTerminated` in the main thread instead: the trainer's handler finishes the loggers with
KILLED, and the exception then ends the process with the exit code a SIGTERM death reports.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["RunEnd", "RunTerminated", "handled_within", "sigterm_raises"]


class RunTerminated(SystemExit):
    """The process received SIGTERM. Uncaught, it exits quietly with code 143 (128 + SIGTERM)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"terminated by signal {signal.Signals(self.signum).name}"


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    del frame
    raise RunTerminated(signum)


@contextlib.contextmanager
def handled_within(signum: int, handler: Any, replacing: Any) -> Iterator[None]:
    """Within the block, `handler` handles `signum`, if the main thread runs the block (Python delivers signals
    there only) and `signum`'s handler now is `replacing`; after it, `replacing` again. Any other handler is
    left alone: the program handles the signal itself."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signum) is not replacing:
        yield
        return
    signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, replacing)


def sigterm_raises() -> contextlib.AbstractContextManager[None]:
    """Within the block, SIGTERM raises `RunTerminated` in the main thread.

    Does nothing outside the main thread or when the program already handles SIGTERM itself: its own handler is
    left alone.
    """
    return handled_within(signal.SIGTERM, _raise_terminated, replacing=signal.SIG_DFL)


class RunEnd:
    """Finishes a run's loggers exactly once: FAILED (KILLED on Ctrl-C and SIGTERM) when an exception
    escapes a `guard` block, FINISHED by ``finish("FINISHED")``."""

    def __init__(self, logger: Any):
        self.logger = logger
        self.finished = False

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """If anything escapes the block, the loggers record the run FAILED (KILLED on Ctrl-C or SIGTERM)."""
        try:
            with sigterm_raises():
                yield
        except (KeyboardInterrupt, RunTerminated) as error:
            self.finish("KILLED", error)
            raise
        except BaseException as error:
            self.finish("FAILED", error)
            raise

    def finish(self, status: str, error: BaseException | None = None) -> None:
        if not self.finished:
            self.finished = True
            self.logger.finish(status, error=error)
