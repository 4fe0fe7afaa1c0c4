"""`LRMonitor`: the learning rate of every optimizer parameter group, every batch (Composer's callback)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence.callback import Callback

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["LRMonitor"]


class LRMonitor(Callback):
    """Logs ``lr-<OptimizerClass>/group<i>`` on BATCH_END: the rate the next batch will use.

    The schedulers have stepped by BATCH_END, so the value is the rate of the batch to come,
    as in Composer. cadence's `Trainer` already logs these keys every batch; with it this
    callback writes the same value a second time at the same step.
    """

    def batch_end(self, state: State, logger: Logger) -> None:
        logger.log_metrics(learning_rates(state))


def learning_rates(state: State) -> dict[str, float]:
    """``{"lr-<OptimizerClass>/group<i>": lr}`` for every parameter group of every optimizer."""
    return {
        f"lr-{type(optimizer).__name__}/group{index}": float(group["lr"])
        for optimizer in state.optimizers
        for index, group in enumerate(optimizer.param_groups)
    }
