"""cadence-mlflow: `MLFlowLogger`, which logs a cadence run to MLflow without ever slowing or killing training.

How it works (the modules, from the caller's side to the server's):

* `logger`: `MLFlowLogger`, the facade. It opens the run in ``__init__`` through
  ``MlflowClient`` (never the fluent global-run API, so several loggers can live in one
  process), or re-attaches to ``run_id``; when a remote server does not answer within
  ``connect_timeout_s``, the run is created *offline* in the local spill store instead.
  ``log_metrics`` only appends ``(key, value, step, timestamp)`` to the outbox's inbox and
  returns; tensors are kept as detached references (read them after logging, never write them
  in place). The `Trainer` calls ``finish`` once; an ``atexit`` hook finishes a logger nobody
  finished.
* `outbox`: `Outbox`, everything logged and not delivered yet, and how delivery goes (failures,
  backoff, whether the run is gone). One lock, its own, and never held during a request.
* `collector`: the thread that turns the inbox into points: one batched device-to-host copy per
  device and dtype (polled, never synchronising the training thread), deterministic name
  sanitisation with collision detection, NaN/inf skipped (one warning per key and a
  ``cadence.nonfinite/<key>`` tag), and a strictly increasing step per key (a repeated or older
  step is dropped, which also removes the points a resumed run logs again). Beyond
  ``max_buffered_points`` the oldest pending points go to append-only JSONL spool files under
  ``spill_dir``, replayed when the server answers again.
* `sender`: the thread that delivers params and tags, then metrics in ``log_batch`` requests
  within MLflow's limits (at most 1000 metrics, 100 params and 100 tags, under 1 MB), then
  artifacts, every ``flush_interval_s`` or as soon as a full request is pending. Failures are
  retried with exponential backoff for as long as the run lasts. Every point is kept until one
  request carrying it is acknowledged and is then forgotten, so it is never sent twice by
  design; a request that fails after the server wrote part of it is resent with identical
  (key, value, timestamp, step) rows, which MLflow's SQL stores deduplicate by primary key.
* `writer`: for a store the client writes itself (``sqlite:``, ``file:``, other SQL databases), on
  a machine with a CUDA device, the sender's calls are made by one child process per training
  process (``out_of_process``):
  MLflow's SQL store spends about 100-250 us of CPU per metric point, which in a thread of the
  training process would hold the GIL the training thread needs. A dead child is started again
  at the next call; its errors come back with their MLflow error codes.
* `spill`: ``finish`` makes a final attempt bounded by ``finish_timeout_s``. Whatever is still
  undelivered is written to a local SQLite MLflow store (``<spill_dir>/spill.db``) and reported
  in one warning naming the path and the import command (`importer`)::

      python -m cadence_mlflow import <spill_dir> --tracking-uri <uri>

* `names` (keys, stable values, params and tags as logged, warnings) and `tracking` (``MlflowClient``
  calls, errors, requests within MLflow's limits) are what the others share.

Warnings raised by the background threads are handed to the caller's thread and issued at its
next call, as `MLflowLoggerWarning`. Once constructed, the logger never raises into the training
loop (only an invalid argument does). Only the process with ``RANK`` 0 (or without ``RANK``)
logs; on other ranks the logger does nothing.
"""

from cadence_mlflow.importer import import_spill, resume_run_id
from cadence_mlflow.logger import MLFlowLogger
from cadence_mlflow.names import MLflowLoggerWarning, flatten_params, sanitize_name, stable_str
from cadence_mlflow.spill import IMPORT_COMMAND, TAG_TARGET_RUN
from cadence_mlflow.tracking import chunk_metrics, chunk_params_tags

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
