"""`State`: everything a method may read or change, and nothing the trainer does with it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cadence.batch import BatchKey, batch_get_item, batch_set_item
from cadence.precision import Precision
from cadence.time import Time, TimeLike, Timestamp, TimeUnit, parse_time

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["Hook", "State"]


class Hook(Protocol):
    """A method (`cadence.Algorithm`) or callback (`cadence.Callback`) as the `State` keeps it.

    The state only holds them and hands them to checkpoints; the `Engine` runs them. Typing
    them by this protocol keeps `state` below `algorithm` and `callback`, which take a `State`.
    """

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


class State:
    """The mutable state of a run, handed to every method and callback.

    Attributes:
        model: the `Model` being trained (never the DDP wrapper, so ``state.model.loss`` works).
        optimizers, schedulers: lists (a single object is wrapped).
        batch, outputs, loss: the current (micro)batch, the forward's outputs, the loss tensor.
        timestamp: where the run is (`Timestamp`); replaced, never mutated.
        max_duration: the length of the run (`Time`), or None.
        dataloader, dataloader_len: the active training loader and its number of batches per epoch.
        device, precision, rank, world_size, rank_zero_seed: the run's environment.
        checkpoint_due: True while the methods run on BATCH_CHECKPOINT, EPOCH_CHECKPOINT or FIT_END
            when the trainer writes a checkpoint right after them (a method that swaps weights for
            checkpoints, such as EMA, reads it); the callbacks of the event run after the write.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        max_duration: TimeLike | None = None,
        rank_zero_seed: int = 0,
        dataloader: Iterable[Any] | None = None,
        dataloader_len: int | None = None,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        schedulers: Any = None,
        algorithms: Sequence[Hook] = (),
        callbacks: Sequence[Hook] = (),
        device: torch.device | str = "cpu",
        precision: Precision | str = Precision.FP32,
        device_train_microbatch_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        run_name: str = "run",
    ):
        self.model = model
        self.max_duration = None if max_duration is None else parse_time("max_duration", max_duration)
        if self.max_duration is not None and self.max_duration.unit is TimeUnit.DURATION:
            raise ValueError(
                f"max_duration={max_duration!r}: 'dur' is relative to max_duration itself; use ep/ba/sp/tok"
            )
        self.rank_zero_seed = rank_zero_seed
        self.dataloader = dataloader
        if dataloader_len is None and dataloader is not None:
            try:
                dataloader_len = len(dataloader)  # type: ignore[arg-type]
            except TypeError:
                dataloader_len = None
        self.dataloader_len = dataloader_len
        self.optimizers: list[torch.optim.Optimizer] = _as_list(optimizers)
        self.schedulers: list[Any] = _as_list(schedulers)
        self.scaler: torch.amp.GradScaler | None = None
        self.algorithms: list[Any] = list(algorithms)  # cadence.Algorithm instances, checked by the Engine
        self.callbacks: list[Any] = list(callbacks)  # cadence.Callback instances (loggers included)
        self.device = torch.device(device)
        self.precision = Precision(precision)
        self.device_train_microbatch_size = device_train_microbatch_size
        self.rank = rank
        self.world_size = world_size
        self.run_name = run_name
        self.timestamp = Timestamp()
        self.batch: Any = None
        self.outputs: Any = None
        self.loss: Any = None
        self.train_metrics: dict[str, Metric] = {}
        self.eval_metrics: dict[str, Metric] = {}
        self.scale_schedule_ratio = 1.0  # the schedules' stretch; set by the trainer and ScaleSchedule on INIT
        self.checkpoint_due = False  # True while methods run on an event after which a checkpoint is written

    @property
    def seed(self) -> int:
        """This rank's seed (``rank_zero_seed + rank``)."""
        return self.rank_zero_seed + self.rank

    # Batch access ----------------------------------------------------------------
    def batch_get_item(self, key: BatchKey) -> Any:
        return batch_get_item(self.batch, key)

    def batch_set_item(self, key: BatchKey, value: Any) -> None:
        self.batch = batch_set_item(self.batch, key, value)

    # Time ------------------------------------------------------------------------
    @property
    def max_batches(self) -> int | None:
        """The run's length in batches, when it can be known (ba, or ep with a sized loader)."""
        if self.max_duration is None:
            return None
        if self.max_duration.unit is TimeUnit.BATCH:
            return int(self.max_duration.value)
        if self.max_duration.unit is TimeUnit.EPOCH and self.dataloader_len:
            return int(self.max_duration.value) * self.dataloader_len
        return None

    def to_batches(self, time: TimeLike) -> int:
        """Convert a `Time` in ba, ep or dur to a number of batches."""
        time = parse_time("time", time)
        if time.unit is TimeUnit.BATCH:
            return int(time.value)
        if time.unit is TimeUnit.EPOCH:
            if not self.dataloader_len:
                raise ValueError(f"cannot convert {time} to batches: the training loader has no length")
            return int(time.value) * self.dataloader_len
        if time.unit is TimeUnit.DURATION:
            if self.max_batches is None:
                raise ValueError(
                    f"cannot convert {time} to batches: max_duration={self.max_duration} is not in ba or ep"
                )
            return round(time.value * self.max_batches)
        raise ValueError(f"cannot convert {time} to batches; schedules take ba, ep or dur")

    def get_elapsed_duration(self) -> Time | None:
        """The fraction of `max_duration` elapsed, as ``Time(x, 'dur')``, batch-grained when possible."""
        if self.max_duration is None:
            return None
        max_batches = self.max_batches
        if max_batches:
            fraction = self.timestamp.batch / max_batches
        else:
            fraction = self.timestamp.get(self.max_duration.unit) / max(self.max_duration.value, 1)
        return Time(min(fraction, 1.0), TimeUnit.DURATION)

    def is_done(self) -> bool:
        if self.max_duration is None:
            return False
        return self.timestamp.get(self.max_duration.unit) >= self.max_duration.value
