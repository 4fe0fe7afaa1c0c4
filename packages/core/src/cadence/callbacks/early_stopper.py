"""`EarlyStopper` (Composer's) and `EarlyStopping` (Lightning's arguments): end the run when a metric stops improving.

Both stop the run the way Composer's ``State.stop_training()`` does: they set
``state.max_duration`` to the batches done so far, so the current batch (and the evaluation
and checkpoint due at it) finishes, then FIT_END runs. cadence does not checkpoint
``max_duration``, so the stopper keeps the batch it stopped at in its own state and sets it
again on AFTER_LOAD: a run resumed from a checkpoint written after the stop stays stopped.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cadence.callback import Callback
from cadence.ops.checks import ArgumentTypeError, check_choice, check_int, check_number, describe
from cadence.time import Time, TimeUnit

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["EarlyStopper", "EarlyStopping"]

_LABELS = ("eval", "train")
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "greater": operator.gt,
    "gt": operator.gt,
    "less": operator.lt,
    "lt": operator.lt,
}
_LOWER_IS_BETTER = ("loss", "error", "perplexity", "entropy")


def _comparison(comp: Any, monitor: str) -> Callable[[Any, Any], Any]:
    if comp is None:  # Composer's default: lower is better for losses, errors and perplexities
        return operator.lt if any(word in monitor.lower() for word in _LOWER_IS_BETTER) else operator.gt
    if isinstance(comp, str):
        return _COMPARISONS[check_choice("comp", comp, _COMPARISONS, hint="or a callable comp(current, best)")]
    if callable(comp):
        return comp
    raise ArgumentTypeError(f"comp={describe(comp)} must be 'greater', 'less' or a callable comp(current, best)")


def _patience(patience: Any) -> Time:
    if isinstance(patience, bool) or not isinstance(patience, (int, str, Time)):
        raise ArgumentTypeError(f"patience={describe(patience)} must be an int (epochs), a time string or a Time")
    time = Time.from_input(patience, default_int_unit=TimeUnit.EPOCH)
    if time.unit not in (TimeUnit.EPOCH, TimeUnit.BATCH) or time.value < 0:
        raise ValueError(f"patience={patience!r} must be a number of epochs or batches >= 0, e.g. 2, '2ep' or '500ba'")
    return time


class EarlyStopper(Callback):
    """Stops the run when `monitor` has not improved for longer than `patience`.

    Args:
        monitor: a metric name of the model (``"MulticlassAccuracy"``, ``"CrossEntropy"``);
            ``"metrics/eval/<name>"`` is accepted too.
        dataloader_label: ``"eval"`` (the trainer's eval_dataloader; checked on EVAL_END) or ``"train"``
            (the train metrics, which need ``compute_train_metrics=True``; checked on EPOCH_END, and on
            BATCH_END too when `patience` is in batches).
        comp: ``"greater"``/``"gt"``, ``"less"``/``"lt"`` or a callable ``comp(current, best)`` of two scalar
            tensors (``torch.greater``, as in Composer); when None,
            ``less`` if the name holds loss, error, perplexity or entropy, else ``greater``.
        min_delta: an improvement must beat the best value by more than this.
        patience: how long the metric may go without improving (an int counts epochs; ``"500ba"``).
    """

    def __init__(
        self,
        monitor: str,
        dataloader_label: str = "eval",
        comp: str | Callable[[Any, Any], Any] | None = None,
        min_delta: float = 0.0,
        patience: int | str | Time = 1,
    ):
        if not isinstance(monitor, str) or not monitor:
            raise ArgumentTypeError(f"monitor={describe(monitor)} must be a metric name, e.g. 'MulticlassAccuracy'")
        hint = "cadence has one evaluation loader, labelled 'eval'"
        self.dataloader_label = check_choice("dataloader_label", dataloader_label, _LABELS, hint=hint)
        self.monitor = monitor.removeprefix(f"metrics/{self.dataloader_label}/")
        self.comp = _comparison(comp, self.monitor)
        self.min_delta = abs(check_number("min_delta", min_delta))
        self.patience = _patience(patience)
        self.best: float | None = None
        self.best_at: tuple[int, int] | None = None  # (epoch, batch) of the best value
        self.checks_since_best = 0
        self.stopped_at_batch: int | None = None
        self._last_train_value: float | None = None

    # Checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_at": list(self.best_at) if self.best_at is not None else None,
            "checks_since_best": self.checks_since_best,
            "stopped_at_batch": self.stopped_at_batch,
            "last_train_value": self._last_train_value,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.best_at = tuple(state["best_at"]) if state["best_at"] is not None else None  # type: ignore[assignment]
        self.checks_since_best = int(state["checks_since_best"])
        self.stopped_at_batch = state["stopped_at_batch"]
        self._last_train_value = state["last_train_value"]

    def after_load(self, state: State, logger: Logger) -> None:
        if self.stopped_at_batch is not None:  # resumed after the stop: stay stopped
            state.max_duration = Time(self.stopped_at_batch, TimeUnit.BATCH)

    # Events -----------------------------------------------------------------------------------
    def fit_start(self, state: State, logger: Logger) -> None:
        self._metric(state)  # an unknown metric name fails before any training, not at the first check

    def eval_end(self, state: State, logger: Logger) -> None:
        if self.dataloader_label == "eval":
            self._check(self._read(state), state)

    def batch_end(self, state: State, logger: Logger) -> None:
        if self.dataloader_label != "train":
            return
        last_of_epoch = not state.dataloader_len or state.timestamp.batch_in_epoch >= state.dataloader_len
        if self.patience.unit is TimeUnit.BATCH or last_of_epoch:  # the train metrics are reset at epoch end
            self._last_train_value = value = self._read(state)
            if self.patience.unit is TimeUnit.BATCH:
                self._check(value, state)

    def epoch_end(self, state: State, logger: Logger) -> None:
        train_epoch_check = self.dataloader_label == "train" and self.patience.unit is TimeUnit.EPOCH
        if train_epoch_check and self._last_train_value is not None:
            self._check(self._last_train_value, state)

    # The rule ---------------------------------------------------------------------------------
    def _metric(self, state: State) -> Any:
        metrics = state.eval_metrics if self.dataloader_label == "eval" else state.train_metrics
        if self.monitor not in metrics:
            known = ", ".join(sorted(metrics)) or "none"
            raise ValueError(
                f"EarlyStopper(monitor={self.monitor!r}, dataloader_label={self.dataloader_label!r}): the model has "
                f"no such {self.dataloader_label} metric; its {self.dataloader_label} metrics are: {known}"
            )
        return metrics[self.monitor]

    def _read(self, state: State) -> float:
        metric = self._metric(state)
        if getattr(metric, "update_count", 1) == 0:
            raise ValueError(
                f"EarlyStopper(monitor={self.monitor!r}, dataloader_label='train') reads a train metric that was "
                "never updated: pass compute_train_metrics=True to the Trainer"
            )
        return float(metric.compute())

    def _check(self, value: float, state: State) -> None:
        position = (int(state.timestamp.epoch), int(state.timestamp.batch))
        improved = not math.isnan(value) and (
            self.best is None
            or (
                bool(self.comp(torch.tensor(value), torch.tensor(self.best)))
                and abs(value - self.best) > self.min_delta
            )
        )
        if improved:
            self.best, self.best_at, self.checks_since_best = value, position, 0
        else:
            self.checks_since_best += 1
        if self._patience_exhausted(position) and self.stopped_at_batch is None:
            self.stopped_at_batch = position[1]
            state.max_duration = Time(self.stopped_at_batch, TimeUnit.BATCH)

    def _patience_exhausted(self, position: tuple[int, int]) -> bool:
        """More time than `patience` has passed since the best value (Composer: strictly more)."""
        since = self.best_at if self.best_at is not None else (0, 0)  # no value yet (all NaN): since the start
        index = 0 if self.patience.unit is TimeUnit.EPOCH else 1
        return position[index] - since[index] > self.patience.value


class EarlyStopping(EarlyStopper):
    """Lightning's ``EarlyStopping`` arguments: stop after `patience` checks in a row without improvement.

    Args:
        monitor: a metric name, as for `EarlyStopper` (Lightning's logged keys such as ``"val_loss"``
            have no cadence equivalent: name the model's metric, e.g. ``"CrossEntropy"``).
        min_delta: an improvement must beat the best value by more than this.
        patience: the number of checks (evaluations) without improvement after which the run stops.
        mode: ``"min"`` (lower is better) or ``"max"``.
        dataloader_label: ``"eval"`` or ``"train"``, as for `EarlyStopper`.
    """

    def __init__(
        self, monitor: str, min_delta: float = 0.0, patience: int = 3, mode: str = "min", dataloader_label: str = "eval"
    ):
        mode = check_choice("mode", mode, ("min", "max"))
        checks = check_int("patience", patience, ge=0, hint="it counts checks (evaluations) without improvement")
        super().__init__(monitor, dataloader_label, comp="less" if mode == "min" else "greater", min_delta=min_delta)
        self.mode = mode
        self.patience_checks = checks

    def _patience_exhausted(self, position: tuple[int, int]) -> bool:
        return self.checks_since_best >= self.patience_checks
