"""`Collector`: the thread that turns the inbox into points for the sender."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from cadence.loggers.mlflow.limits import MAX_KEY_LENGTH, MAX_METRICS_PER_REQUEST
from cadence.loggers.mlflow.names import _NameMap
from cadence.loggers.mlflow.state import Notices, Point, RunTarget, Shared

_log = logging.getLogger(__name__)


_BAD_VALUE = object()


_NOT_SCALAR = object()


class Collector:
    """Inbox -> accepted points in `Shared.pending`, off the training thread.

    Values are read to the host with one batched copy per device and dtype (polled, so the
    training thread is never synchronised). Names are sanitised deterministically; NaN/inf,
    non-scalar values and steps that are not a 64-bit int are dropped with one warning per key,
    and so is a step not above the key's last one (silently on a resumed run, which logs
    again what it logged before the crash). Beyond ``max_buffered_points`` pending points the
    oldest go to append-only JSONL spool files, which the sender replays first.
    """

    def __init__(self, run: RunTarget, shared: Shared, notices: Notices, attached: bool,
                 prepare_spill: Callable[[], None]):  # fmt: skip
        self._run, self._shared, self._notices = run, shared, notices
        self._attached = attached
        self._prepare_spill = prepare_spill
        self._lock = threading.Lock()  # one collection at a time: this thread's or finish's last one
        self._metric_names = _NameMap("metric")
        self.last_step: dict[str, int] = {}  # the latest step per key (seeded from a resumed run)
        self._warned_keys: set[tuple[str, str]] = set()
        self._spool_seq = 0
        self._interval = max(0.01, min(run.flush_interval_s / 2, 0.5))
        self._thread = threading.Thread(target=self._main, name="cadence-mlflow-collect", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def _main(self) -> None:
        while True:
            self._shared.collect_wake.wait(self._interval)
            self._shared.collect_wake.clear()
            stop = self._shared.closed
            try:
                self.collect()
                if self._shared.struggling(slow_s=2.0):
                    self._prepare_spill()
            except Exception:
                _log.exception("cadence: collecting metrics for MLflow failed")
            if stop:
                return

    def collect(self, lock_timeout_s: float = -1) -> None:
        """Move everything in the inbox to the pending points (or drop it, with a warning)."""
        if not self._lock.acquire(timeout=lock_timeout_s):
            return
        shared = self._shared
        try:
            with shared.lock:
                shared.collecting = True
                items = [shared.inbox.popleft() for _ in range(len(shared.inbox))]
            if not items:
                return
            values = self._to_floats([item[1] for item in items])
            accepted = []
            for (raw, _, step, timestamp), value in zip(items, values):
                point = self._accept(str(raw), value, step, timestamp)
                if point is not None:
                    accepted.append(point)
            with shared.lock:
                shared.pending.extend(accepted)
                bound = self._run.max_buffered_points
                if len(shared.pending) > bound:
                    self._spool_oldest(len(shared.pending) - bound // 2)
                due = len(shared.pending) >= MAX_METRICS_PER_REQUEST or shared.flush_requests or shared.finishing
            if due:
                shared.send_wake.set()
        finally:
            with shared.lock:
                shared.collecting = False
                shared.cv.notify_all()
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
                self._notices.defer(f"could not read metric values on {device}: {err!r}; they are not logged")
                for index in indices:
                    out[index] = _BAD_VALUE
        return out

    def _accept(self, raw: str, value: Any, step: Any, timestamp: int) -> Point | None:
        key, message = self._metric_names(raw)
        if message:
            self._notices.defer(message)
        if value is _BAD_VALUE or value is _NOT_SCALAR:
            self._drop_once(key, "type", f"metric {raw!r} is not a number or a one-element tensor; it is not logged")
            return None
        if not math.isfinite(value):
            if ("nonfinite", key) not in self._warned_keys:
                with self._shared.lock:
                    self._shared.pending_tags[f"cadence.nonfinite/{key}"[:MAX_KEY_LENGTH]] = f"{value} at step {step}"
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
        step = number
        last = self.last_step.get(key)
        if last is not None and step <= last:
            message = (
                f"metric {raw!r} was already logged at step {last}; points at step {step} and earlier are "
                f"dropped so that every step appears once, in increasing order"
            )
            if self._attached:  # a resumed run logs again what it logged before the crash
                self._run.stats["dropped_points"] += 1
            else:
                self._drop_once(key, "step-order", message)
            return None
        self.last_step[key] = step
        return key, value, timestamp, step

    def _drop_once(self, key: str, kind: str, message: str) -> None:
        self._run.stats["dropped_points"] += 1
        if (kind, key) not in self._warned_keys:
            self._warned_keys.add((kind, key))
            self._notices.defer(message)

    def _spool_oldest(self, count: int) -> None:
        """Move the `count` oldest pending points to a spool file (called with `Shared.lock` held)."""
        shared, stats = self._shared, self._run.stats
        points = [shared.pending.popleft() for _ in range(count)]
        folder = self._run.spool_folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            meta = folder / "meta.json"
            if not meta.exists():
                meta.write_text(json.dumps(self._run.spool_meta(), indent=1))
            self._spool_seq += 1
            path = folder / f"{self._spool_seq:06d}.jsonl"
            partial = path.with_suffix(".partial")
            with partial.open("w") as handle:
                handle.writelines(json.dumps(point) + "\n" for point in points)
            os.replace(partial, path)
        except OSError as err:
            stats["dropped_points"] += len(points)
            self._notices.defer(f"{len(points)} metric points could not be spooled to {folder} and are lost: {err}")
            return
        shared.spool_files.append(path)
        stats["spooled_points"] += len(points)
        if stats["spooled_points"] == len(points):
            self._notices.defer(
                f"MLflow tracking at {self._run.tracking_uri} is not keeping up ({shared.last_error or 'slow'}); "
                f"more than {self._run.max_buffered_points} points were pending, so the oldest are spooled to "
                f"{folder} and sent when the server answers again"
            )


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
