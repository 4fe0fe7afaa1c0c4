"""`Collector`: the thread that turns what the caller logged into points, off the training thread."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from cadence_mlflow.names import MAX_KEY_LENGTH, NameMap, Point
from cadence_mlflow.outbox import Outbox

_log = logging.getLogger(__name__)

_BAD_VALUE = object()
_NOT_SCALAR = object()


class Collector:
    """Inbox -> accepted points in the outbox.

    Values are read to the host with one batched copy per device and dtype (polled, so the
    training thread is never synchronised). Names are sanitised deterministically; NaN/inf
    (recorded in a ``cadence.nonfinite/<key>`` tag), non-scalar values and steps that are not a
    64-bit int are dropped with one warning per key, and so is a step not above the key's last
    one (silently on a resumed run, which logs again what it logged before the crash).

    After each pass it calls `on_outage` if the server has been failing (or silent) for 2 s.
    """

    def __init__(self, outbox: Outbox, report: Callable[[str], None], *, interval_s: float, resumed: bool,
                 last_steps: Mapping[str, int], on_outage: Callable[[], None]):  # fmt: skip
        self._outbox, self._report = outbox, report
        self._interval, self._resumed, self._on_outage = interval_s, resumed, on_outage
        self._lock = threading.Lock()  # one collection at a time: this thread's or finish's last one
        self._names = NameMap("metric")
        self._last_step: dict[str, int] = dict(last_steps)  # the latest step per key
        self._warned: set[tuple[str, str]] = set()
        self.stats = {"dropped_points": 0}
        self._thread = threading.Thread(target=self._main, name="cadence-mlflow-collect", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def _main(self) -> None:
        outbox = self._outbox
        while True:
            outbox.wait_for_collect(self._interval)
            stop = outbox.closed
            try:
                self.collect()
                if outbox.struggling(slow_s=2.0):
                    self._on_outage()
            except Exception:
                _log.exception("cadence: collecting metrics for MLflow failed")
            if stop:
                return

    def collect(self, lock_timeout_s: float = -1) -> None:
        """Move everything in the inbox to the outbox's points (or drop it, with a warning)."""
        if not self._lock.acquire(timeout=lock_timeout_s):
            return
        try:
            items = self._outbox.take_inbox()
            if items:
                values = self._to_floats([item[1] for item in items])
                accepted = []
                for (raw, _, step, timestamp), value in zip(items, values):
                    point = self._accept(str(raw), value, step, timestamp)
                    if point is not None:
                        accepted.append(point)
                self._outbox.add_points(accepted)
        finally:
            self._outbox.done_collecting()
            self._lock.release()

    def _to_floats(self, values: list[Any]) -> list[Any]:
        """Python floats (or markers) for logged values; one host copy per device and dtype."""
        out: list[Any] = [None] * len(values)
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for index, value in enumerate(values):
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    out[index] = _NOT_SCALAR
                else:
                    groups.setdefault((value.device, value.dtype), []).append(index)
            else:
                out[index] = _as_float(value)
        for (device, _), indices in groups.items():
            try:
                stacked = torch.stack([values[i].reshape(()) for i in indices])
                host = _to_host(stacked) if device.type == "cuda" else stacked.cpu()
                for index, number in zip(indices, host.tolist()):
                    out[index] = _as_float(number)
            except Exception as err:
                self._report(f"could not read metric values on {device}: {err!r}; they are not logged")
                for index in indices:
                    out[index] = _BAD_VALUE
        return out

    def _accept(self, raw: str, value: Any, step: Any, timestamp: int) -> Point | None:
        key, message = self._names(raw)
        if message:
            self._report(message)
        if value is _BAD_VALUE or value is _NOT_SCALAR:
            self._drop_once(key, "type", f"metric {raw!r} is not a number or a one-element tensor; it is not logged")
            return None
        if not math.isfinite(value):
            if ("nonfinite", key) not in self._warned:
                self._outbox.add_tags({f"cadence.nonfinite/{key}"[:MAX_KEY_LENGTH]: f"{value} at step {step}"})
            self._drop_once(
                key, "nonfinite", f"metric {raw!r} is {value} at step {step}; non-finite values are not logged"
            )
            return None
        try:
            number = int(step)
        except (TypeError, ValueError, OverflowError):
            number = 2**63
        if not -(2**63) <= number < 2**63:
            self._drop_once(key, "step", f"metric {raw!r} has step {step!r}, not a 64-bit int; it is not logged")
            return None
        last = self._last_step.get(key)
        if last is not None and number <= last:
            if self._resumed:  # a resumed run logs again what it logged before the crash
                self.stats["dropped_points"] += 1
            else:
                self._drop_once(key, "step-order", f"metric {raw!r} was already logged at step {last}; points at "
                                f"step {number} and earlier are dropped so that every step appears once, in "
                                f"increasing order")  # fmt: skip
            return None
        self._last_step[key] = number
        return key, value, timestamp, number

    def _drop_once(self, key: str, kind: str, message: str) -> None:
        self.stats["dropped_points"] += 1
        if (kind, key) not in self._warned:
            self._warned.add((kind, key))
            self._report(message)


def _as_float(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return float(value)
    try:
        return float(value)  # NumPy scalars, Decimal, ...
    except (TypeError, ValueError):
        return _BAD_VALUE


def _to_host(stacked: torch.Tensor) -> torch.Tensor:
    """Copy a CUDA tensor to the host without a blocking synchronisation: copy, record, poll."""
    with torch.cuda.device(stacked.device):
        host = stacked.to("cpu", non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    while not event.query():
        time.sleep(0.0005)
    return host
