"""The evaluation and prediction loops, with their events; the `Trainer` calls them.

Both run the model in eval mode without gradients, under the run's precision, and put the model's
mode back afterwards. Evaluation updates the model's eval metrics on the device and returns them
computed, read back once at the end: torchmetrics' input checks (``validate_args``, which read values
back) run on the first batch only. Prediction returns the outputs (moved to the CPU) or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from cadence.batch import batch_to_device
from cadence.engine import Engine
from cadence.event import Event
from cadence.precision import autocast_context

__all__ = ["run_eval", "run_predict"]


@torch.no_grad()
def run_eval(engine: Engine, batches: Iterable[Any]) -> dict[str, float]:
    """EVAL_START ... EVAL_END over `batches`; returns the computed metrics."""
    state = engine.state
    was_training = state.model.training
    state.model.eval()
    metrics = list(state.eval_metrics.values())  # once per evaluation, as the autocast context: not per batch
    for metric in metrics:
        metric.reset()
    engine.run_event(Event.EVAL_START)
    evaluated = 0
    checking = [m for m in metrics if getattr(m, "validate_args", None) is True]
    autocast = autocast_context(state.precision, state.device)  # entered once per batch, never nested
    try:
        for batch in batches:
            evaluated += 1
            state.batch = batch_to_device(batch, state.device)
            engine.run_planned(Event.EVAL_BATCH_START)
            engine.run_planned(Event.EVAL_BEFORE_FORWARD)
            with autocast:
                state.outputs = state.model.eval_forward(state.batch)
            engine.run_planned(Event.EVAL_AFTER_FORWARD)
            for metric in metrics:
                state.model.update_metric(state.batch, state.outputs, metric)
            if evaluated == 1:  # inputs checked on the first batch only: the check reads values back (a sync)
                for metric in checking:
                    metric.validate_args = False
            engine.run_planned(Event.EVAL_BATCH_END)
    finally:
        for metric in checking:
            metric.validate_args = True
    if not evaluated:
        raise ValueError(
            "eval_dataloader yielded no batches, so there is nothing to evaluate (metrics would read 0 or NaN); "
            "check its dataset and drop_last, or leave eval_dataloader out"
        )
    results = {name: float(metric.compute()) for name, metric in state.eval_metrics.items()}
    engine.logger.log_metrics({f"metrics/eval/{name}": value for name, value in results.items()})
    engine.run_event(Event.EVAL_END)
    state.model.train(was_training)
    return results


@torch.no_grad()
def run_predict(engine: Engine, batches: Iterable[Any], return_outputs: bool = True) -> list[Any]:
    """PREDICT_START ... PREDICT_END: the model's forward (``model(batch)``) on each batch, in eval mode.

    With `return_outputs`, each batch's outputs are moved to the CPU and returned in a list (as
    Composer's ``Trainer.predict``); without, callbacks see ``state.outputs`` on PREDICT_AFTER_FORWARD
    and nothing is kept. ``state.batch`` and ``state.outputs`` are restored afterwards.
    """
    state = engine.state
    kept_batch, kept_outputs, was_training = state.batch, state.outputs, state.model.training
    state.model.eval()
    outputs: list[Any] = []
    try:
        engine.run_event(Event.PREDICT_START)
        for batch in batches:
            state.batch = batch_to_device(batch, state.device)
            engine.run_event(Event.PREDICT_BATCH_START)
            engine.run_event(Event.PREDICT_BEFORE_FORWARD)
            with autocast_context(state.precision, state.device):
                state.outputs = state.model(state.batch)
            engine.run_event(Event.PREDICT_AFTER_FORWARD)
            if return_outputs:
                outputs.append(batch_to_device(state.outputs, torch.device("cpu")))
            engine.run_event(Event.PREDICT_BATCH_END)
        engine.run_event(Event.PREDICT_END)
    finally:
        state.batch, state.outputs = kept_batch, kept_outputs
        state.model.train(was_training)
    return outputs
