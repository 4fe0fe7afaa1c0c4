"""How one run of a grid runs: in a worker process of its own, or in the grid's process.

A worker process (``cadence_harness worker``) isolates a crash, a hang (a timeout) or an out-of-memory
kill; the grid's process saves the interpreter, import, CUDA and data start-up of every run after the
first. Both record a failed run FAILED in MLflow with the reason, and retry an out-of-memory error with
half the microbatch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from cadence.termination import handled_within
from cadence_harness.records import TAG
from cadence_harness.running.runspec import RunSpec
from cadence_harness.running.scale_out import launcher
from cadence_harness.running.tracking import mark_failed

__all__ = [
    "KILLED",
    "OOM_EXIT_CODE",
    "Interruption",
    "run_launched",
    "run_one_in_process",
    "run_one_in_subprocess",
    "run_worker",
    "sigint_reaches_workers",
    "warm_up_process",
    "worker_environment",
]

OOM_EXIT_CODE = 3
_POLL_S = 0.5  # how often a waiting grid thread looks for an interruption
KILLED = "killed: the grid was interrupted (Ctrl-C or SIGTERM); the run is recorded KILLED"


def worker_threads(jobs: int, device: str, environ: Mapping[str, str] = os.environ) -> int | None:
    """The intra-op threads of each CPU worker when `jobs` run at once: the machine's cores shared out among them.
    Left to torch (every core per process), N busy workers on the same cores spin in each other's OpenMP barriers:
    a 200-batch run beside one other busy process on 2 cores took 142 s instead of about 15 s. None (inherit)
    for one job, on a GPU, or when the user set ``OMP_NUM_THREADS``."""
    if jobs <= 1 or device == "gpu" or "OMP_NUM_THREADS" in environ:
        return None
    return max(1, (os.cpu_count() or 1) // jobs)


def worker_environment(
    threads: int | None, temp_dir: Path | None, environ: Mapping[str, str] = os.environ
) -> dict[str, str] | None:
    """A worker's environment (None: this process's): ``OMP_NUM_THREADS`` = `threads` (`worker_threads`), and
    `temp_dir` as its temporary folder (``TMPDIR``), which the grid removes once the worker has ended. A worker
    that crashes or is killed (a timeout, a grace run out) never removes what it made there, such as the MLflow
    logger's staged artifacts; a folder of its own goes with it. torch.compile's kernel cache stays where it
    was (``TORCHINDUCTOR_CACHE_DIR``, by default under the temporary folder), shared by every run's worker."""
    if threads is None and temp_dir is None:
        return None
    env = dict(environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    if temp_dir is not None:
        env["TMPDIR"] = str(temp_dir)
        if "TORCHINDUCTOR_CACHE_DIR" not in env and (kernels := _inductor_cache_dir()) is not None:
            env["TORCHINDUCTOR_CACHE_DIR"] = kernels
    return env


def _inductor_cache_dir() -> str | None:
    """torch.compile's default kernel cache for this process (None where torch no longer has that function:
    the workers then compile into their own temporary folders)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return default_cache_dir()


def sigint_reaches_workers() -> contextlib.AbstractContextManager[None]:
    """Within the block, workers started by a grid that itself ignores SIGINT still start with SIGINT at its
    default, so the SIGINT with which the grid stops them (`Interruption`) is heard.

    A grid started with SIGINT ignored (a script's background job: POSIX shells ignore it there) keeps ignoring
    it, through a handler that does nothing instead of SIG_IGN: an ignored signal stays ignored across exec,
    a handled one starts at its default in the new program. Python then installs its KeyboardInterrupt handler
    in the worker, as in a terminal. Only the main thread can change a handler; elsewhere nothing changes."""
    return handled_within(signal.SIGINT, _still_ignored, replacing=signal.SIG_IGN)


def _still_ignored(signum: int, frame: Any) -> None:
    """SIGINT for a grid that was started with it ignored: nothing happens (see `sigint_reaches_workers`)."""


class Interruption:
    """A grid's Ctrl-C as its runs see it: once `interrupt` is called no run starts, and every worker process
    running gets SIGINT, records its run KILLED and exits (killed outright after `grace_s` seconds)."""

    def __init__(self, grace_s: float = 60.0, worker_threads: int | None = None) -> None:
        self.grace_s = grace_s
        self.worker_threads = worker_threads  # OMP_NUM_THREADS of every worker (`worker_threads`), None: inherited
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._workers: set[subprocess.Popen[bytes]] = set()

    @property
    def interrupted(self) -> bool:
        return self._event.is_set()

    def interrupt(self) -> None:
        self._event.set()
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGINT)

    def start(self, command: list[str], log: Any, temp_dir: Path | None = None) -> subprocess.Popen[bytes]:
        """Start a worker writing to `log`; `temp_dir`: its temporary folder (`worker_environment`)."""
        with self._lock:
            env = worker_environment(self.worker_threads, temp_dir)
            worker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            self._workers.add(worker)
        if self.interrupted:  # interrupted between the check and the start
            worker.send_signal(signal.SIGINT)
        return worker

    def wait(self, worker: subprocess.Popen[bytes], timeout_s: float | None) -> int:
        """The worker's exit code. Past `timeout_s` it is killed and `subprocess.TimeoutExpired` raised; once the
        grid is interrupted it has `grace_s` to record its run KILLED, then it is killed (its code is then the
        negative signal number), with or without a timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while not self.interrupted:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    worker.kill()
                    worker.wait()
                    raise subprocess.TimeoutExpired(worker.args, timeout_s or 0.0)
                try:
                    return worker.wait(timeout=_POLL_S if left is None else min(_POLL_S, left))
                except subprocess.TimeoutExpired:
                    continue
            try:  # interrupted: the worker is recording its run KILLED
                return worker.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                worker.kill()
                return worker.wait()
        finally:
            with self._lock:
                self._workers.discard(worker)


def _worker_command(
    spec_file: Path, uri: str, id_file: Path, options: dict[str, str | None], nproc: int = 1
) -> list[str]:
    """The worker's command line: ``python -m cadence_harness worker ...``, through torchrun when `nproc` > 1."""
    command = [*launcher(nproc), "worker", str(spec_file), "--tracking-uri", uri]
    command += ["--run-id-file", str(id_file)]
    for flag, value in options.items():
        if value is not None:
            command += [flag] if value == "" else [flag, value]
    return command


def run_worker(
    spec_file: Path,
    *,
    tracking_uri: str | None,
    tags: dict[str, str],
    run_id_file: str | None = None,
    data_dir: str | None = None,
    download: bool = False,
    microbatch_size: int | None = None,
    progress_bar: bool = False,
) -> int:
    """The worker process's side of `run_one_in_subprocess` (``cadence_harness worker``): one run of a
    grid. Returns the exit code: 0, `OOM_EXIT_CODE` when the run ran out of memory, else 1."""
    from cadence.loggers import failure_kind
    from cadence_harness.running.run import execute

    spec = RunSpec.from_json(spec_file.read_text())
    try:
        execute(
            spec,
            tracking_uri=tracking_uri,
            data_dir=data_dir,
            download=download,
            progress_bar=progress_bar,
            tags=tags,
            run_id_file=run_id_file,
            microbatch_size=microbatch_size,
        )
    except Exception as error:
        import traceback

        traceback.print_exc()
        return OOM_EXIT_CODE if failure_kind(error) == "oom" else 1
    return 0


def run_one_in_process(
    spec: RunSpec,
    *,
    uri: str,
    tags: dict[str, str],
    data_dir: str | None = None,
    download: bool = False,
) -> str | None:
    """Run `spec` in this process; returns None on success, else the reason it failed (recorded in MLflow).

    A failure inside the Trainer is recorded by the Trainer; one before it (building the data or the model)
    is recorded here. An out-of-memory error is retried with half the microbatch, as in a worker process.
    """
    import traceback

    from cadence.loggers import failure_kind
    from cadence_harness.running.collector import collect_and_freeze
    from cadence_harness.running.run import execute

    microbatch = spec.recipe.device_train_microbatch_size
    with tempfile.TemporaryDirectory() as folder:
        id_file = Path(folder) / "run_id"
        while True:
            id_file.unlink(missing_ok=True)
            collect_and_freeze()  # no run is alive: the collection when its fit starts walks only what it built
            try:
                execute(
                    spec,
                    tracking_uri=uri,
                    data_dir=data_dir,
                    download=download,
                    progress_bar=False,
                    tags=tags,
                    run_id_file=id_file,
                    microbatch_size=microbatch,
                )
                return None
            except Exception as error:  # KeyboardInterrupt ends the grid (the Trainer marks the run KILLED)
                reason = "".join(traceback.format_exception(error)[-3:]).strip()
                oom = failure_kind(error) == "oom"
            _free_device_memory()  # the failed run's tensors, released with its traceback at the except's end
            run_id = id_file.read_text().strip() if id_file.is_file() else None
            mark_failed(
                uri, run_id=run_id, experiment=spec.experiment, run_name=spec.run_name, tags={**spec.tags(), **tags},
                error=reason,
            )  # fmt: skip
            microbatch = (microbatch or spec.recipe.batch_size) // 2
            if not oom or microbatch < 1:
                return reason
            tags = {**tags, f"{TAG}oom_retry_microbatch": str(microbatch)}


def _free_device_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_one_in_subprocess(
    spec: RunSpec,
    *,
    uri: str,
    log_dir: Path,
    tags: dict[str, str],
    data_dir: str | None = None,
    download: bool = False,
    timeout_s: float | None = None,
    interruption: Interruption | None = None,
) -> str | None:
    """Run `spec` in a worker process; returns None on success, else the reason it failed (recorded in MLflow:
    FAILED, or KILLED when `interruption` was interrupted while it ran)."""
    interruption = interruption or Interruption()
    log_dir.mkdir(parents=True, exist_ok=True)
    microbatch = spec.recipe.device_train_microbatch_size
    with tempfile.TemporaryDirectory() as folder:
        spec_file, id_file, temp_dir = Path(folder) / "spec.json", Path(folder) / "run_id", Path(folder) / "tmp"
        spec_file.write_text(spec.to_json())
        temp_dir.mkdir()  # the worker's temporary folder: removed with `folder`, however the worker ended
        while True:
            log_file = log_dir / f"{spec.experiment}-{spec.run_name}-{spec.config_hash[:8]}.log"
            options = {
                "--data-dir": data_dir,
                "--download": "" if download else None,
                "--microbatch-size": str(microbatch) if microbatch else None,
            }
            command = _worker_command(spec_file, uri, id_file, options, spec.recipe.nproc)
            for key, value in tags.items():
                command += ["--tag", f"{key}={value}"]
            id_file.unlink(missing_ok=True)
            try:
                with log_file.open("w") as log:
                    code = interruption.wait(interruption.start(command, log, temp_dir), timeout_s)
                reason = None if code == 0 else f"worker exited with code {code}:\n{_tail(log_file)}"
            except subprocess.TimeoutExpired:
                code, reason = -1, f"timed out after {timeout_s} s"
            if reason is None:
                return None
            killed = interruption.interrupted
            run_id = id_file.read_text().strip() if id_file.is_file() else None
            mark_failed(
                uri,
                run_id=run_id,
                experiment=spec.experiment,
                run_name=spec.run_name,
                tags={**spec.tags(), **tags},
                error=KILLED if killed else reason,
                log_file=log_file,
                status="KILLED" if killed else "FAILED",
            )
            if killed:
                return KILLED
            if code != OOM_EXIT_CODE:
                return reason
            microbatch = (microbatch or spec.recipe.batch_size) // 2
            if microbatch < 1:
                return reason
            tags = {**tags, f"{TAG}oom_retry_microbatch": str(microbatch)}


def run_launched(
    spec: RunSpec, *, uri: str, tags: dict[str, str], data_dir: str | None, download: bool, progress_bar: bool
) -> Any:
    """``cadence-bench run --nproc N``: one run of `spec` as a torchrun job whose output is this console's;
    returns its `RunResult`, read back from MLflow (rank 0's run). A job that fails raises `RuntimeError`,
    its run recorded FAILED."""
    from cadence_harness.running.run import RunResult
    from cadence_harness.running.tracking import client

    options = {"--data-dir": data_dir, "--download": "" if download else None}
    options["--progress"] = "" if progress_bar else None
    with tempfile.TemporaryDirectory() as folder:
        spec_file, id_file = Path(folder) / "spec.json", Path(folder) / "run_id"
        spec_file.write_text(spec.to_json())
        command = _worker_command(spec_file, uri, id_file, options, spec.recipe.nproc)
        command += [arg for key, value in tags.items() for arg in ("--tag", f"{key}={value}")]
        code = subprocess.run(command).returncode
        run_id = id_file.read_text().strip() if id_file.is_file() else None
    if code != 0 or run_id is None:
        reason = f"the torchrun job of {spec.recipe.nproc} processes exited with code {code} (its output is above)"
        mark_failed(uri, run_id=run_id, experiment=spec.experiment, run_name=spec.run_name,
                    tags={**spec.tags(), **tags}, error=reason)  # fmt: skip
        raise RuntimeError(f"{spec.run_name}: {reason}")
    run = client(uri).get_run(run_id)
    return RunResult(run_id, dict(run.data.metrics), run.data.params.get("data_source", ""))


def warm_up_process(spec: RunSpec, *, data_dir: str | None = None, download: bool = False) -> float:
    """One epoch of `spec`, unrecorded (a throwaway MLflow store), before an in-process grid's first run.

    A process pays one-time costs on its first run: CUDA and cuDNN initialisation, autotuning, kernels loaded on
    first use, lazy imports, MLflow's first writes from its background thread. On an H200 the first run of a
    process trained for 6.9 s where the runs after it took 2.3-2.9 s (and a run in a fresh worker process,
    5.7 s): the warm-up batches do not absorb them all. Paid here, they land in no recorded run. Returns the
    seconds it took.
    """
    import contextlib
    import dataclasses
    import time

    from cadence_harness.running.run import execute

    schedule = {k: v for k, v in spec.recipe.schedule.items() if k != "cycles"}
    recipe = dataclasses.replace(spec.recipe, duration="1ep", durations=(), schedule=schedule, target_accuracy=None)
    started = time.perf_counter()
    # a failure is the recorded run's to report: it will fail the same way
    with tempfile.TemporaryDirectory() as folder, contextlib.suppress(Exception):
        execute(
            RunSpec(recipe, spec.arm, spec.seed, "warm-up"),
            tracking_uri=f"sqlite:///{Path(folder) / 'warmup.db'}",
            data_dir=data_dir,
            download=download,
            progress_bar=False,
        )
    _free_device_memory()
    return time.perf_counter() - started
