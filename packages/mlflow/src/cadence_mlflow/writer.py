"""`WriterClient`: the sender's MLflow calls made by a child process, off the training process's GIL.

A local tracking store (``sqlite:///...``, a ``file:`` folder) is written by the client itself: MLflow's SQL
store spends about 100-250 us of CPU per metric point (building and merging SQLAlchemy rows). In a thread of
the training process that work holds the GIL, which the training thread needs between two kernel launches;
on a GPU whose step is bound by the host, a run logging its loss and learning rate at every step lost about
0.5 ms per step to it (`harness/measurements/2026-11-26-h200-study-complete.md`). A remote server does that
work in its own process, so only local stores are written through the child (`is_local_store`), and by
default only on a machine with a CUDA device (`writes_out_of_process`).

One child per training process serves every logger and store (an `MlflowClient` per tracking URI, made when
first used). It is started as ``python -c`` calling `serve_fds` rather than `multiprocessing`'s spawn,
which would import the user's script again in the child. Calls go over a pipe, one at a time; the caller's
thread waits without the GIL. The child's errors come back as errors that `tracking.classify` reads as it
read the originals (an MLflow error keeps its error code). If the child dies, the call fails as an outage
(the sender retries it) and the next call starts a new child.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cadence_mlflow.tracking import error_code

__all__ = ["RemoteError", "WriterClient", "is_local_store", "writes_out_of_process"]

_METHODS = ("log_batch", "set_terminated", "log_artifact", "log_artifacts")
_ENTRY = "import sys; from cadence_mlflow.writer import serve_fds; serve_fds(int(sys.argv[1]), int(sys.argv[2]))"


_CLIENT_WRITTEN = {"", "file", "sqlite", "postgresql", "mysql", "mssql"}  # MLflow's file and SQL stores


def writes_out_of_process(out_of_process: bool | None, store: str) -> bool:
    """Whether a logger writes `store` from the child: as asked, else (None) for a local store on a machine with
    a CUDA device. There the training thread launches kernels and needs the GIL between them; on a CPU-only
    machine the store's work costs the same CPU in a thread, and a child would add its start-up (about 1.5 s of
    CPU importing MLflow) beside the training it competes with for cores."""
    if out_of_process is not None:
        return out_of_process
    import torch

    return os.name == "posix" and is_local_store(store) and torch.cuda.is_available()  # the child needs pass_fds


def is_local_store(uri: str) -> bool:
    """Whether the MLflow client writes the store at `uri` itself (a local folder, or a database through
    SQLAlchemy: ``sqlite:///``, ``postgresql+psycopg2://``, ...) rather than asking a tracking server."""
    if uri.startswith("databricks"):  # "databricks" alone names a workspace, not a folder
        return False
    return urlparse(uri).scheme.split("+")[0] in _CLIENT_WRITTEN


class RemoteError(RuntimeError):
    """An error raised in the writer process that is not MLflow's own (its type and message, as text)."""


class RemoteTypeError(TypeError):
    """A TypeError raised in the writer process: the request's content was refused (`tracking.classify`)."""


class _Child:
    """The writer process and the two ends of its pipes."""

    def __init__(self) -> None:
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        package_root = str(Path(__file__).resolve().parents[1])  # importable however this process found it
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, str(child_reads), str(child_writes)],
            pass_fds=(child_reads, child_writes),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path},
        )
        os.close(child_reads)
        os.close(child_writes)
        self.send = Connection(parent_writes, readable=False)
        self.receive = Connection(parent_reads, writable=False)

    def close(self) -> None:
        for end in (self.send, self.receive):
            end.close()
        try:
            self.process.wait(timeout=10)  # the child ends when its pipe closes
        except subprocess.TimeoutExpired:
            self.process.kill()


class _Writer:
    """The process-wide child, started on first use and again after it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one call at a time, whichever logger makes it
        self._child: _Child | None = None
        atexit.register(self.close)  # registered before any logger's: runs after their final flushes

    def call(self, uri: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._lock:
            if self._child is None or self._child.process.poll() is not None:
                self._child = _Child()
            child = self._child
            try:
                child.send.send((uri, method, args, kwargs))
                ok, value = child.receive.recv()
            except (EOFError, OSError) as err:
                self._child = None
                child.process.kill()
                raise ConnectionError(f"the MLflow writer process ended ({err!r}); the request is retried") from err
        if ok:
            return value
        raise _rebuilt(*value)

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._child.close()
                self._child = None


_writer: _Writer | None = None
_writer_lock = threading.Lock()


def _shared_writer() -> _Writer:
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = _Writer()
        return _writer


class WriterClient:
    """The part of ``MlflowClient`` the sender uses (`log_batch`, `set_terminated`, `log_artifact(s)`), for one
    tracking URI, each call made by the shared writer process."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri
        self._writer = _shared_writer()

    def __getattr__(self, name: str) -> Any:
        if name not in _METHODS:
            raise AttributeError(f"WriterClient has no {name!r}; it makes only {', '.join(_METHODS)}")
        return lambda *args, **kwargs: self._writer.call(self.tracking_uri, name, args, kwargs)


def _rebuilt(kind: str, code: str | None, message: str) -> BaseException:
    """The caller's copy of an error the child raised (see `_described`)."""
    if code is not None:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import ErrorCode

        try:
            return MlflowException(message, error_code=ErrorCode.Value(code))
        except ValueError:  # a code this MLflow does not know: still an MLflow error, read as transient
            return MlflowException(f"{message} (error code {code})")
    return (RemoteTypeError if kind == "TypeError" else RemoteError)(f"{kind}: {message}")


def _described(err: BaseException) -> tuple[str, str | None, str]:
    """``(type name, MLflow error code or None, message)``: what `_rebuilt` needs, always picklable."""
    code = error_code(err)
    kind = "TypeError" if isinstance(err, TypeError) else type(err).__name__
    return kind, str(code) if code is not None else None, str(err)


def _serve(receive: Connection, send: Connection) -> None:
    """The child: answer calls until the parent closes its end."""
    from mlflow.tracking import MlflowClient

    clients: dict[str, Any] = {}
    while True:
        try:
            uri, method, args, kwargs = receive.recv()
        except EOFError:
            return
        try:
            client = clients.get(uri) or clients.setdefault(uri, MlflowClient(tracking_uri=uri))
            getattr(client, method)(*args, **kwargs)  # the sender's calls return nothing it reads
            reply: tuple[bool, Any] = (True, None)
        except Exception as err:
            reply = (False, _described(err))
        send.send(reply)


def serve_fds(receive_fd: int, send_fd: int) -> None:
    """The child's entry point (`_ENTRY`): serve calls over the two pipe ends it inherited."""
    _serve(Connection(receive_fd, writable=False), Connection(send_fd, readable=False))
