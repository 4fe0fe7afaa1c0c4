"""`RunTimer`: how long training took, apart from evaluation and warm-up, and when it hit the target.

The measured region is training only: data loading, methods, forward, backward and the optimizer step.
Evaluation pauses it (EVAL_BEFORE_ALL to EVAL_AFTER_ALL), and the first `warmup_batches` batches (which pay
``torch.compile`` and allocator warm-up) are timed on their own line. So is every *shape warm-up*: the first
step of each distinct piece of work (a new input shape from progressive resizing or ColOut, a new model
structure after surgery or layer freezing), which pays cuDNN autotuning, recompilation and the FLOP counter's
one counted pass (`cadence_harness.running.flops`), which calls `time_apart` as it starts: FLOP counting never
runs inside the timed region. A compiled forward runs that counted step eagerly (Dynamo cannot trace under the
counter's dispatch mode) and compiles in the next one, so with ``compile`` the first two steps of each piece of
work are timed apart, three with CUDA graphs (the third records them). On CUDA the region is bracketed with CUDA
events, synchronised only where the loop already synchronises (evaluation reads its metrics back) and at the
end; on CPU it uses ``time.perf_counter``.

Beside wall-clock, the same segments accumulate the process's CPU time (``time.process_time``:
every thread of this process, user and system). On a shared machine another process slows the
clock but not this process's CPU time, so ``final/cpu_s`` is the steadier cost on CPU, though not
immune: torch's OpenMP threads can spin while they wait for a descheduled sibling, and spinning is CPU
time. DataLoader worker processes are not included (the default tensor loader has none). The training
thread's own CPU time is kept apart (``final/main_thread_cpu_s``): on a GPU it is the host work that feeds
the device. `MachineProbe` reads the host's load and the GPU's clock, temperature and power at each
evaluation and at the end (``final/host_load``, ``final/gpu_*``), and how fast the host ran
(``final/host_speed_us``, ``final/host_steal_frac``), so that a slow run can be told apart as a busy or slow
host or a throttled device. Python's garbage collector runs one full collection as the fit starts,
before the clocks, and every collection inside the training clock is timed (``final/gc_*``;
`cadence_harness.running.collector`).
"""

from __future__ import annotations

import resource
import sys
import time
from typing import TYPE_CHECKING, Any

import torch

from cadence.callback import Callback
from cadence_harness.running.collector import CollectorPauses
from cadence_harness.running.flops import job_sum
from cadence_harness.running.machine_probe import MachineProbe

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["RunTimer", "peak_memory_mb"]


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: the most memory allocated by tensors; CPU: the process's maximum resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


class _Stopwatch:
    """Accumulates the time of start/stop segments; CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.total = 0.0
        self.cpu_total = 0.0
        self.thread_total = 0.0  # CPU time of the thread that trains (the one that feeds a GPU)
        self._start: Any = None
        self._cpu_start = 0.0
        self._thread_start = 0.0

    def start(self) -> None:
        self._cpu_start = time.process_time()
        self._thread_start = time.thread_time()
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self) -> float:
        """End the segment (synchronising on CUDA) and return the running total in seconds."""
        if self._start is None:
            return self.total
        self.cpu_total += time.process_time() - self._cpu_start
        self.thread_total += time.thread_time() - self._thread_start
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            self.total += self._start.elapsed_time(end) / 1000
        else:
            self.total += time.perf_counter() - self._start
        self._start = None
        return self.total

    @property
    def running(self) -> bool:
        return self._start is not None


class RunTimer(Callback):
    """Times a run and logs ``time/*``, ``throughput/*`` and ``memory/*`` metrics.

    `time_apart` (the FLOP counter's ``on_count``) times the rest of the current batch as warm-up: it is
    the first of a new piece of work. Nothing is done per batch otherwise (no event, no clock read).

    Args:
        target_metric: the eval metric compared with `target` (e.g. ``"MulticlassAccuracy"``).
        target: the value that counts as reached; time-to-target is the training time at the
            first evaluation that reaches it.
        warmup_batches: batches timed apart as warm-up (compile); they still train.
    """

    def __init__(self, target_metric: str | None = None, target: float | None = None, warmup_batches: int = 0):
        self.target_metric = target_metric
        self.target = target
        self.warmup_batches = warmup_batches
        self.shape_warmups = 0  # batches timed apart because they were the first of their shape
        self._warmup_samples = 0  # samples of those batches (out of the throughput)
        self._in_shape_warmup = False
        self._batch_samples = 0  # the current batch's samples (read when a shape warm-up ends it)
        self._state: State | None = None
        self.train: _Stopwatch | None = None
        self.warmup: _Stopwatch | None = None
        self.eval_s = 0.0
        self.data_wait_s = 0.0
        self.samples = 0
        self.tokens = 0
        self.time_to_target_s: float | None = None
        self.last_value: float | None = None
        self.last_perplexity: float | None = None
        self.history: list[tuple[int, float, float]] = []  # (batch, train seconds, metric value)
        self._wall_start = 0.0
        self.wall_s = 0.0
        self._eval_start = 0.0
        self._paused = False  # whether evaluation paused a running training clock
        self._data_start = 0.0
        self._samples_at_start = 0
        self._tokens_at_start = 0
        self.probe: MachineProbe | None = None
        self.collector = CollectorPauses(lambda: self.train is not None and self.train.running)

    def close(self, state: State, logger: Logger) -> None:
        self.collector.stop()  # a fit that raised never reached fit_end

    # Training region --------------------------------------------------------------------
    def fit_start(self, state: State, logger: Logger) -> None:
        self.collector.start(collect_first=True)  # before the clocks: the collection building the run made due
        self._state = state  # `time_apart` reads the sample count from it
        self.probe = MachineProbe(state.device)
        self.probe.start()
        if state.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(state.device)
        self._wall_start = time.perf_counter()
        self.train, self.warmup = _Stopwatch(state.device), _Stopwatch(state.device)
        (self.warmup if self.warmup_batches > state.timestamp.batch else self.train).start()
        self._samples_at_start = state.timestamp.sample
        self._tokens_at_start = state.timestamp.token

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._data_start = time.perf_counter()

    def after_dataloader(self, state: State, logger: Logger) -> None:
        self.data_wait_s += time.perf_counter() - self._data_start

    def time_apart(self) -> None:
        """From now to the end of this batch, time as warm-up (a first piece of work is being counted)."""
        if self._in_shape_warmup or self.train is None or not self.train.running:
            return
        self.train.stop()
        self.warmup.start()  # type: ignore[union-attr]
        self._in_shape_warmup = True
        self._batch_samples = self._state.timestamp.sample if self._state is not None else 0

    def batch_end(self, state: State, logger: Logger) -> None:
        assert self.train is not None and self.warmup is not None
        if self._in_shape_warmup:
            self.warmup.stop()
            self._in_shape_warmup = False
            self.shape_warmups += 1
            self._warmup_samples += state.timestamp.sample - self._batch_samples
            self.train.start()
        if self.warmup._start is not None and state.timestamp.batch >= self.warmup_batches:  # running, read inline
            self.warmup.stop()
            self._samples_at_start = state.timestamp.sample
            self._tokens_at_start = state.timestamp.token
            self.train.start()

    # Evaluation pauses the clock ---------------------------------------------------------
    # From the evaluation's first event to its last, so that all the trainer does for it is evaluation time: the
    # methods' work at EVAL_START and EVAL_END (EMA swaps its average in and out) and the model's metrics, which
    # the trainer builds before FIT_START when it will evaluate but which `Trainer.eval` may build on first use.
    def eval_before_all(self, state: State, logger: Logger) -> None:
        self._paused = self.train is not None and self.train.running
        if self.train is not None and self._paused:
            self.train.stop()
        self._eval_start = time.perf_counter()

    def eval_after_all(self, state: State, logger: Logger) -> None:
        self.eval_s += time.perf_counter() - self._eval_start
        if self.train is None:  # an eval() outside fit()
            return
        if self.probe is not None:
            self.probe.read(speed_repeats=1)  # after the device worked (training and evaluation), outside the timing
        train_s = self.train.total
        metrics: dict[str, float] = {
            "time/train_s": train_s,
            "time/cpu_s": self.train.cpu_total,
            "time/eval_s": self.eval_s,
        }
        metric = state.eval_metrics.get(self.target_metric or "")
        if metric is not None:
            self.last_value = float(metric.compute())
            self.history.append((state.timestamp.batch, train_s, self.last_value))
            if self.target is not None and self.time_to_target_s is None and self.last_value >= self.target:
                self.time_to_target_s = train_s
                metrics["time/time_to_target_s"] = train_s
        perplexity = state.eval_metrics.get("LanguagePerplexity")  # a language model's other quality measure
        if perplexity is not None:
            self.last_perplexity = float(perplexity.compute())
        logger.log_metrics(metrics)
        if self._paused:
            self.train.start()

    eval_standalone_start = eval_before_all  # `Trainer.eval()` outside fit: its own first and last events
    eval_standalone_end = eval_after_all

    def fit_end(self, state: State, logger: Logger) -> None:
        assert self.train is not None and self.warmup is not None
        self.warmup.stop()
        self.train.stop()
        self.wall_s = time.perf_counter() - self._wall_start
        self.collector.stop()
        if self.probe is not None:
            self.probe.read()
        local = state.timestamp.sample - self._samples_at_start - self._warmup_samples
        self.samples = int(job_sum(local))  # under torchrun, every rank's samples: the job's throughput
        self.tokens = int(job_sum(state.timestamp.token - self._tokens_at_start))
        logger.log_metrics(self.summary(state.device))

    def summary(self, device: torch.device) -> dict[str, float]:
        """The run's totals, as the ``final/*`` metrics the report reads."""
        assert self.train is not None and self.warmup is not None
        train_s = self.train.total
        summary = {
            "final/train_s": train_s,
            "final/cpu_s": self.train.cpu_total,
            "final/main_thread_cpu_s": self.train.thread_total,
            "final/warmup_s": self.warmup.total,
            "final/shape_warmups": float(self.shape_warmups),
            "final/eval_s": self.eval_s,
            "final/wall_s": self.wall_s,
            "final/samples_per_s": self.samples / train_s if train_s > 0 else 0.0,
            "final/data_wait_frac": self.data_wait_s / self.wall_s if self.wall_s > 0 else 0.0,
            "final/peak_memory_mb": peak_memory_mb(device),
        }
        summary.update(self.collector.summary())
        if self.probe is not None:
            summary.update(self.probe.summary())
        if self.tokens:
            summary["final/tokens_per_s"] = self.tokens / train_s if train_s > 0 else 0.0
        if self.last_value is not None:
            summary["final/accuracy"] = self.last_value
        if self.last_perplexity is not None:
            summary["final/perplexity"] = self.last_perplexity
        if self.target is not None:
            summary["final/reached_target"] = float(self.time_to_target_s is not None)
            if self.time_to_target_s is not None:
                summary["final/time_to_target_s"] = self.time_to_target_s
        return summary


DATA_BOUND_FRACTION = 0.2  # a run that waited longer than this share of its run for its batches is data-bound


def data_bound_warning(metrics: dict[str, float], run_name: str) -> str | None:
    """A warning when the run waited for its batches (the loader, and the methods that augment them as they
    arrive) above `DATA_BOUND_FRACTION` of its run, else None: then the input pipeline, not the model, set its
    pace, and its training time, and any time speedup read from it, measure that pipeline."""
    waited = metrics.get("final/data_wait_frac", 0.0)
    if waited <= DATA_BOUND_FRACTION:
        return None
    return (
        f"warning: {run_name} waited for its batches {waited:.0%} of its run (above {DATA_BOUND_FRACTION:.0%}): "
        "the data pipeline set its pace, so its training time measures the pipeline, not the model. Keep the data "
        "on the device (the harness's tensor loaders), augment on the device (batched=True), or give a "
        "DataLoader more workers (num_workers)"
    )
