"""`FlopCounter`: the training FLOPs a run actually spent, counted once per distinct piece of work.

Wall-clock time on a shared machine varies by tens of percent from run to run; FLOPs do not.
Counting every batch under ``torch.utils.flop_counter.FlopCounterMode`` would slow training, so
each distinct piece of work is counted once, the first time it runs, and then multiplied by how
often it ran:

* a training microbatch: its forward, loss and backward, from ``BEFORE_FORWARD`` to
  ``AFTER_BACKWARD``, keyed by the shapes and dtypes of the microbatch the model receives (after
  every method changed it: progressive resizing's smaller images, ColOut's dropped rows and
  columns, selective backprop's kept samples) and by the model's structure (module count and
  trainable tensors, which surgery and layer freezing change);
* any other forward of the model during training, such as selective backprop's scoring pass over
  the whole batch, keyed the same way plus whether gradients were on.

The first occurrence is counted on the real computation (no extra pass, no randomness drawn), so a
method that changes shapes is counted as what ran. That one step runs under the mode's Python
dispatch and is slower than the others; `pieces` says so, and the harness's `RunTimer` times
such a step apart (as a *shape warm-up*, with cuDNN autotuning and recompilation at that shape), so
counting never slows the timed region.
Evaluation is not training and is not counted. Counts follow FlopCounterMode: matrix products and
convolutions (a multiply-add is 2 FLOPs); elementwise work, normalisation and the optimizer step
count 0. Work whose cost varies at one shape (stochastic depth's dropped blocks) is counted as its
first occurrence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from cadence.callback import Callback

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["FlopCounter", "shapes_of"]

Key = tuple[Any, ...]


def shapes_of(value: Any) -> Any:
    """The shapes and dtypes of every tensor in a batch (tuples, lists and dicts), as a hashable key."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype))
    if isinstance(value, Mapping):
        return tuple((str(k), shapes_of(v)) for k, v in sorted(value.items(), key=lambda item: str(item[0])))
    if isinstance(value, (list, tuple)):
        return tuple(shapes_of(v) for v in value)
    return type(value).__name__


def _structure(model: torch.nn.Module) -> tuple[bool, int, int]:
    """What of the model changes its cost at a fixed input shape: mode, module count, trainable tensors."""
    modules = sum(1 for _ in model.modules())
    trainable = sum(1 for p in model.parameters() if p.requires_grad)
    return (model.training, modules, trainable)


class FlopCounter(Callback):
    """Counts training FLOPs (see the module docstring); logs ``cost/flops`` at each evaluation and
    ``final/flops``, ``final/flop_shapes`` (distinct pieces of work counted) at the end."""

    def __init__(self) -> None:
        self.flops: dict[Key, int] = {}
        self.counts: Counter[Key] = Counter()
        self._mode: FlopCounterMode | None = None
        self._measuring: Key | None = None
        self._in_step = False
        self._in_eval = False
        self._hooks: list[Any] = []

    @property
    def pieces(self) -> int:
        """How many pieces of work have been counted so far: a batch during which this grows ran one under the
        counter's slow dispatch (time it apart, see `RunTimer`)."""
        return len(self.flops) + (self._mode is not None)

    @property
    def total(self) -> int:
        return sum(self.flops.get(key, 0) * count for key, count in self.counts.items())

    # Measuring one occurrence ---------------------------------------------------------------
    def _begin(self, key: Key) -> None:
        self.counts[key] += 1
        if key in self.flops or self._mode is not None:
            return
        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()
        self._measuring = key

    def _end(self) -> None:
        if self._mode is None:
            return
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        if self._measuring is not None:
            self.flops[self._measuring] = int(mode.get_total_flops())
        self._measuring = None

    # Training microbatches ------------------------------------------------------------------
    def fit_start(self, state: State, logger: Logger) -> None:
        model = state.model
        self._hooks = [model.register_forward_pre_hook(self._pre_forward), model.register_forward_hook(self._forward)]

    def before_forward(self, state: State, logger: Logger) -> None:
        self._in_step = True
        self._begin(("step", shapes_of(state.batch), _structure(state.model)))

    def after_backward(self, state: State, logger: Logger) -> None:
        self._end()
        self._in_step = False

    # Other forwards of the model during training (a method scoring samples) -----------------
    def _pre_forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self._in_step or self._in_eval:
            return
        self._begin(("forward", shapes_of(args), torch.is_grad_enabled(), _structure(module)))

    def _forward(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not self._in_step and not self._in_eval:
            self._end()

    # Evaluation is not counted --------------------------------------------------------------
    def eval_start(self, state: State, logger: Logger) -> None:
        self._in_eval = True

    def eval_end(self, state: State, logger: Logger) -> None:
        self._in_eval = False
        logger.log_metrics({"cost/flops": float(self.total)})

    def fit_end(self, state: State, logger: Logger) -> None:
        logger.log_metrics(self.summary())

    def summary(self) -> dict[str, float]:
        return {"final/flops": float(self.total), "final/flop_shapes": float(len(self.flops))}

    def close(self, state: State, logger: Logger) -> None:
        self._end()  # a run that failed between BEFORE_FORWARD and AFTER_BACKWARD leaves no mode behind
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
