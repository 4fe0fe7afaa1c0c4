"""`State`: everything a method may read or change, and nothing the trainer does with it."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cadence._timestring import Count
from cadence.batch import BatchKey, batch_get_item, batch_set_item
from cadence.precision import Precision
from cadence.time import _COUNTERS, Time, TimeLike, Timestamp, TimeUnit, parse_time

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["Hook", "State"]

_DURATION_UNITS = (TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN)


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
        max_duration: the length of the run (`Time` in ep, ba, sp or tok), or None; assigning a string
            or an int (epochs) converts it, as in Composer (``state.max_duration = '10ep'``).
        dataloader, dataloader_label, dataloader_len: the active loader, its label and its number of
            batches per epoch (an int that also reads as Composer's ``Time`` in ba); see `set_dataloader`.
        train_dataloader: the training loader (cadence trains from it; `dataloader` is the same loader).
        device, precision, rank, world_size, rank_zero_seed: the run's environment.
        iteration_length: epochs per iteration (ITERATION_END fires after each); None, the default, makes
            the whole run one iteration, as in Composer.
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
        dataloader_label: str | None = None,
    ):
        # Any: the trainer takes any module with ``loss(outputs, batch)`` (duck-typed, as Composer), and a
        # method reads its own attributes on it; typed as a Module, every such read would need a cast
        self.model: Any = model
        self.max_duration = max_duration  # type: ignore[assignment]  # the setter makes it a Time
        self.rank_zero_seed = rank_zero_seed
        self.train_dataloader = dataloader
        self.dataloader = dataloader
        self.dataloader_label = dataloader_label or ("train" if dataloader is not None else None)
        self.dataloader_len = dataloader_len  # type: ignore[assignment]  # None or -1: len(dataloader)
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
        self._metrics: dict[bool, dict[str, Metric]] = {}  # is_train -> metrics, once built or set
        self._metrics_from_model = False  # build them from model.get_metrics on first use (`defer_metrics`)
        self.scale_schedule_ratio = 1.0  # the schedules' stretch; set by the trainer and ScaleSchedule on INIT
        self.checkpoint_due = False  # True while methods run on an event after which a checkpoint is written
        self.iteration_length: int | None = None  # epochs per iteration (Composer's _iteration_length); None: one

    @property
    def seed(self) -> int:
        """This rank's seed (``rank_zero_seed + rank``)."""
        return self.rank_zero_seed + self.rank

    # Metrics -------------------------------------------------------------------------
    @property
    def train_metrics(self) -> dict[str, Metric]:
        """Metrics updated on training batches (with ``compute_train_metrics``), by name."""
        return self._metrics_for(is_train=True)

    @train_metrics.setter
    def train_metrics(self, metrics: dict[str, Metric]) -> None:
        self._metrics[True] = metrics

    @property
    def eval_metrics(self) -> dict[str, Metric]:
        """Metrics computed on evaluation batches, by name."""
        return self._metrics_for(is_train=False)

    @eval_metrics.setter
    def eval_metrics(self, metrics: dict[str, Metric]) -> None:
        self._metrics[False] = metrics

    def defer_metrics(self) -> None:
        """From now on, build each set of metrics from ``model.get_metrics`` (on ``device``) when first read.

        The trainer calls this after INIT instead of building them: a run that never evaluates (or
        never computes train metrics) never imports torchmetrics, whose import pulls in scipy,
        matplotlib and transformers whenever they are installed (seconds of start-up). A fit builds
        the ones it will use just before FIT_START (`build_metrics`), outside any clock started there.
        """
        self._metrics.clear()
        self._metrics_from_model = True

    def build_metrics(self, train: bool, evaluation: bool) -> None:
        """Build now the train and/or eval metrics, if not built yet, so that their first use costs no import."""
        for is_train, wanted in ((True, train), (False, evaluation)):
            if wanted:
                self._metrics_for(is_train)

    def built_metrics(self, is_train: bool) -> dict[str, Metric]:
        """The metrics if they were built or set, else ``{}`` without building them (for checkpoints:
        metrics never built were never updated, so there is no state to save)."""
        return self._metrics.get(is_train, {})

    def _metrics_for(self, is_train: bool) -> dict[str, Metric]:
        metrics = self._metrics.get(is_train)
        if metrics is None:
            get_metrics = getattr(self.model, "get_metrics", None) if self._metrics_from_model else None
            made = get_metrics(is_train=is_train) if get_metrics is not None else {}
            metrics = self._metrics[is_train] = {name: metric.to(self.device) for name, metric in made.items()}
        return metrics

    # Batch access ----------------------------------------------------------------
    def batch_get_item(self, key: BatchKey) -> Any:
        return batch_get_item(self.batch, key)

    def batch_set_item(self, key: BatchKey, value: Any) -> None:
        self.batch = batch_set_item(self.batch, key, value)

    # Data ------------------------------------------------------------------------
    def set_dataloader(
        self, dataloader: Iterable[Any] | None = None, dataloader_label: str | None = None, dataloader_len: Any = -1
    ) -> None:
        """Make `dataloader` the active loader, as Composer's ``State.set_dataloader`` does.

        `dataloader_label` names it (required with a loader); `dataloader_len` is its number of
        batches per epoch (an int or a `Time` in ba), -1 for ``len(dataloader)``; a length above
        ``len(dataloader)`` is cut to it with a warning. No loader clears the label and the length.
        """
        if dataloader is not None and dataloader_label is None:
            raise ValueError("set_dataloader(dataloader, dataloader_label=None): name the loader, e.g. 'train'")
        self.dataloader = dataloader
        self.dataloader_label = None if dataloader is None else dataloader_label
        self.dataloader_len = None if dataloader is None else dataloader_len

    @property
    def dataloader_len(self) -> Count | None:
        """Batches per epoch of the active loader, or None when unknown."""
        return self._dataloader_len

    @dataloader_len.setter
    def dataloader_len(self, num_batches: int | Time | None) -> None:
        if isinstance(num_batches, Time):
            num_batches = int(parse_time("dataloader_len", num_batches, units=(TimeUnit.BATCH,)).value)
        if num_batches is not None and (isinstance(num_batches, bool) or not isinstance(num_batches, int)):
            raise TypeError(f"dataloader_len={num_batches!r} must be a number of batches (an int), -1 or None")
        try:
            loader_len: int | None = len(self.dataloader)  # type: ignore[arg-type]
        except TypeError:
            loader_len = None
        if num_batches is None or num_batches < 0:
            num_batches = loader_len
        elif loader_len is not None and num_batches > loader_len:
            warnings.warn(
                f"dataloader_len={num_batches} is more than the loader's {loader_len} batches; using {loader_len}",
                stacklevel=2,
            )
            num_batches = loader_len
        self._dataloader_len = None if num_batches is None else Count(num_batches, TimeUnit.BATCH)

    # Time ------------------------------------------------------------------------
    @property
    def max_duration(self) -> Time | None:
        """The length of the run; set it to a `Time`, a string (``'10ep'``) or an int (epochs)."""
        return self._max_duration

    @max_duration.setter
    def max_duration(self, max_duration: TimeLike | None) -> None:
        if max_duration is not None:
            max_duration = parse_time("max_duration", max_duration)
            if max_duration.unit not in _DURATION_UNITS:
                why = (
                    "'dur' is relative to max_duration itself"
                    if max_duration.unit is TimeUnit.DURATION
                    else ("cadence's trainer counts epochs, batches, samples and tokens")
                )
                raise ValueError(f"max_duration={max_duration}: {why}; use ep, ba, sp or tok, e.g. '10ep'")
        self._max_duration = max_duration

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

    def get_elapsed_duration(self, whole_units: bool = False) -> Time | None:
        """The fraction of `max_duration` elapsed, as ``Time(x, 'dur')``, at most 1.

        Batch-grained when possible: with ``max_duration='10ep'``, 5 of 10 batches into the first epoch
        is 0.05, so schedules and methods move every batch and a resumed run sees the same values.
        ``whole_units=True`` gives Composer's count, whole units of max_duration's unit (0.0 there).
        """
        if self.max_duration is None:
            return None
        max_batches = None if whole_units else self.max_batches
        if max_batches:
            fraction = self.timestamp.batch / max_batches
        else:
            fraction = self.timestamp.get(self.max_duration.unit) / max(self.max_duration.value, 1)
        return Time(min(fraction, 1.0), TimeUnit.DURATION)

    def is_done(self) -> bool:
        duration = self._max_duration  # asked after every batch: the counter is read without `Timestamp.get`
        if duration is None:
            return False
        counter = _COUNTERS.get(duration.unit)
        done = getattr(self.timestamp, counter) if counter else self.timestamp.get(duration.unit)
        return done >= duration.value
