"""`MLFlowLogger`: logs a run to MLflow without ever slowing or killing training.

How it works:

* The run is created (or, with ``run_id``, re-attached) in ``__init__`` through
  ``mlflow.tracking.MlflowClient``, never the fluent global-run API, so several loggers can
  live in one process. When a remote tracking server does not answer within
  ``connect_timeout_s``, the run is created *offline* in the local spill store instead.
* ``log_metrics`` only appends ``(key, value, step, timestamp)`` to an in-memory inbox and
  returns. Tensors are kept as detached references (read them after logging, never write
  them in place); they are read back to the host in a background thread.
* A *collector* thread turns the inbox into points: one batched device-to-host copy per
  device and dtype (polled, never synchronising the training thread), deterministic name
  sanitisation with collision detection, NaN/inf skipped (one warning per key and a
  ``cadence.nonfinite/<key>`` tag), and a strictly increasing step per key (a repeated or
  older step is dropped, which also removes the points a resumed run logs again). The
  pending points are bounded: beyond ``max_buffered_points`` the oldest go to append-only
  JSONL spool files under ``spill_dir`` and are replayed when the server answers again.
* A *sender* thread delivers params and tags, then metrics in ``log_batch`` requests
  within MLflow's limits (at most 1000 metrics, 100 params and 100 tags, under 1 MB), then
  artifacts. It sends every ``flush_interval_s`` or as soon as a full request is pending.
  Failures are retried with exponential backoff for as long as the run lasts. Every point
  is kept until one request carrying it is acknowledged and is then forgotten, so it is
  never sent twice by design; a request that fails after the server wrote part of it is
  resent with identical (key, value, timestamp, step) rows, which MLflow's SQL stores
  deduplicate by primary key.
* ``finish`` makes a final attempt bounded by ``finish_timeout_s``. Whatever is still
  undelivered is written to a local SQLite MLflow store (``<spill_dir>/spill.db``) and
  reported in one warning naming the path and the import command::

      python -m cadence.loggers.mlflow import <spill_dir> --tracking-uri <uri>

Warnings raised by the background threads are handed to the caller's thread and issued at
its next call, as `MLflowLoggerWarning`. Once constructed, the logger never raises into the
training loop (only an invalid argument does).

The package: `logger` (`MLFlowLogger`, the facade that wires the parts), `state` (what the parts
share: the run, the lock-guarded queues and counters, the caller's warnings), `connect` (opening
the run), `record` (params and tags as logged), `collector` and `sender` (the two threads),
`delivery` (the sender's requests), `spill_writer` (the spill store at finish), `limits` (request
packing), `names` (sanitisation, params), `store` (tracking-store plumbing), `spill` (the spill
store's format and its importer).
"""

from cadence.loggers.mlflow.limits import MLflowLoggerWarning, chunk_metrics, chunk_params_tags
from cadence.loggers.mlflow.logger import MLFlowLogger
from cadence.loggers.mlflow.names import flatten_params, sanitize_name, stable_str
from cadence.loggers.mlflow.spill import IMPORT_COMMAND, TAG_TARGET_RUN, import_spill, resume_run_id

__all__ = [
    "IMPORT_COMMAND",
    "TAG_TARGET_RUN",
    "MLFlowLogger",
    "MLflowLoggerWarning",
    "chunk_metrics",
    "chunk_params_tags",
    "flatten_params",
    "import_spill",
    "resume_run_id",
    "sanitize_name",
    "stable_str",
]
