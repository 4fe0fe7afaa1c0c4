"""Callbacks Composer and Lightning users reach for: they observe the run, log, and may end it early.

`LRMonitor`
    Logs ``lr-<OptimizerClass>/group<i>`` (e.g. ``lr-SGD/group0``) for every parameter group of
    every optimizer on BATCH_END, after the schedulers stepped: the rate of the next batch.

`SpeedMonitor(window_size=100, gpu_flops_available=None, time_unit="hours")`
    Once `window_size` batches are timed, logs on every BATCH_END the rolling averages
    ``throughput/batches_per_sec``, ``throughput/samples_per_sec`` (and ``throughput/tokens_per_sec``
    when batches hold tokens, ``throughput/flops_per_sec`` when the model has ``flops_per_batch(batch)``),
    each also per device under ``throughput/device/...``, and ``throughput/device/mfu`` when
    `gpu_flops_available` is given. Every BATCH_END it logs ``time/train``, ``time/val``,
    ``time/total`` (and the same under ``time_<unit>/...``) in `time_unit`, and ``time/secs_per_step``
    in seconds. A batch is timed from BEFORE_DATALOADER to BATCH_END (data loading included;
    evaluation and checkpointing not); the totals are checkpointed.

`MemoryMonitor(memory_keys=None)`
    On AFTER_TRAIN_BATCH, on a CUDA device: ``memory/current_allocated_mem``, ``current_active_mem``,
    ``current_inactive_mem``, ``current_reserved_mem``, their ``peak_*`` versions (gigabytes, from
    ``torch.cuda.memory_stats``) and ``memory/alloc_retries`` (a count). On every device, the host
    process's memory: ``memory/host/peak_rss_gb`` (standard library ``resource``, Unix) and
    ``memory/host/rss_gb`` (only when psutil is installed). On a CPU run only the host keys appear.

`EarlyStopper(monitor, dataloader_label="eval", comp=None, min_delta=0.0, patience=1)`
    Composer's: reads the model's metric `monitor` (eval metrics on EVAL_END; train metrics, which
    need ``compute_train_metrics=True``, on EPOCH_END) and stops the run once it has not improved by
    more than `min_delta` for longer than `patience` (an int counts epochs; ``"500ba"``). Logs nothing.

`EarlyStopping(monitor, min_delta=0.0, patience=3, mode="min", dataloader_label="eval")`
    Lightning's arguments on the same machinery: stops after `patience` checks in a row without
    improvement. Both stoppers checkpoint their best value and counters, and a run resumed after
    the stop stays stopped.
"""

from cadence.callbacks.early_stopper import EarlyStopper, EarlyStopping
from cadence.callbacks.lr_monitor import LRMonitor
from cadence.callbacks.memory_monitor import MemoryMonitor
from cadence.callbacks.speed_monitor import SpeedMonitor

__all__ = ["EarlyStopper", "EarlyStopping", "LRMonitor", "MemoryMonitor", "SpeedMonitor"]
