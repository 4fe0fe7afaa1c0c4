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
dispatch and is slower than the others; `on_count` says so as it starts, and the harness's `RunTimer` times
such a step apart (as a *shape warm-up*, with cuDNN autotuning and recompilation at that shape), so
counting never slows the timed region.
Evaluation is not training and is not counted. Counts follow FlopCounterMode: matrix products and
convolutions (a multiply-add is 2 FLOPs); elementwise work, normalisation and the optimizer step
count 0. Work whose cost varies at one shape (stochastic depth's dropped blocks) is counted as its
first occurrence.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from cadence.callback import Callback
from cadence.distributed import all_gather_object, get_world_size

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["FlopCounter", "shapes_of"]

Key = tuple[Any, ...]
_SHAPE_AND_DTYPE = operator.attrgetter("shape", "dtype")  # what `shapes_of` keys a tensor by: (torch.Size, dtype)
_IS_TENSOR = torch.Tensor.__instancecheck__  # isinstance(x, torch.Tensor) as one argument's function


def shapes_of(value: Any) -> Any:
    """The shapes and dtypes of every tensor in a batch (tuples, lists and dicts), as a hashable key."""
    if isinstance(value, torch.Tensor):
        return (value.shape, value.dtype)  # a torch.Size is a tuple
    if isinstance(value, (list, tuple)):  # before Mapping, an ABC whose isinstance check costs more (every step)
        if all(map(_IS_TENSOR, value)):  # (inputs, targets), every step: keyed in C, no call per item
            return tuple(map(_SHAPE_AND_DTYPE, value))
        return tuple(map(shapes_of, value))  # map: no generator frame
    if isinstance(value, Mapping):
        return tuple((str(k), shapes_of(v)) for k, v in sorted(value.items(), key=lambda item: str(item[0])))
    return type(value).__name__


class _Structure:
    """What of the model changes its cost at a fixed input shape: mode, module count, trainable tensors.

    Walking every module at every step costs tens of microseconds, so the module count and the parameter list
    are kept and walked again only after a module or parameter was registered anywhere (surgery replaces
    modules through registration; torch's global registration hooks say so); trainable tensors are counted
    over the kept list each step (layer freezing changes ``requires_grad`` without registering anything).
    """

    def __init__(self) -> None:
        self._stale = True
        self._modules = 0
        self._parameters: list[torch.nn.Parameter] = []
        from torch.nn.modules import module as nn_module

        self._hooks = [
            nn_module.register_module_module_registration_hook(self._touch),
            nn_module.register_module_parameter_registration_hook(self._touch),
        ]

    def _touch(self, *args: Any) -> None:
        self._stale = True

    def __call__(self, model: torch.nn.Module) -> tuple[bool, int, int]:
        if self._stale:
            self._modules = sum(1 for _ in model.modules())
            self._parameters = list(model.parameters())
            self._stale = False
        return (model.training, self._modules, sum(map(_REQUIRES_GRAD, self._parameters)))  # in C: every step

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def job_sum(value: float) -> float:
    """`value` summed over the processes of a torchrun job (each rank trains on its own part of every batch, so
    the job's cost is the sum of theirs); `value` itself in one process. A collective: every rank must call it,
    at the same point (an evaluation, the end of fit), never inside a step."""
    return float(sum(all_gather_object(float(value)))) if get_world_size() > 1 else float(value)


class FlopCounter(Callback):
    """Counts training FLOPs (see the module docstring); logs ``cost/flops`` at each evaluation and
    ``final/flops``, ``final/flop_shapes`` (distinct pieces of work counted) at the end."""

    def __init__(self, on_count: Callable[[], None] | None = None, occurrences_apart: int = 1) -> None:
        """`on_count` is called as the counter starts counting a new piece of work, inside its slow step (the
        harness's `RunTimer.time_apart`: the rest of that batch is timed as warm-up), and again at the start of
        its next ``occurrences_apart - 1`` occurrences: 2 for a compiled forward, whose counted occurrence runs
        eagerly (`cadence._compilation`) so that the next one compiles; 3 with CUDA graphs, recorded after a warm-up
        call (`cadence_harness.running.run.occurrences_apart`)."""
        if occurrences_apart < 1:
            raise ValueError(
                f"occurrences_apart={occurrences_apart!r}: use 1, 2 for a compiled forward, 3 with CUDA graphs"
            )
        self.occurrences_apart = occurrences_apart
        self.flops: dict[Key, int] = {}
        self._counts: Counter[Key] = Counter()
        self._settled: Key | None = None  # the last piece of work, counted and past its occurrences apart...
        self._repeats = 0  # ... and how often it ran again since, not yet in `_counts`
        self._mode: FlopCounterMode | None = None
        self._measuring: Key | None = None
        self._in_step = False
        self._in_eval = False
        self._hooks: list[Any] = []
        self._structure: _Structure | None = None
        self.on_count = on_count
        self.job_total: float | None = None  # every rank's FLOPs together, set at the end of fit

    @property
    def counts(self) -> Counter[Key]:
        """How often each piece of work ran."""
        if self._repeats:
            self._counts[self._settled] += self._repeats  # type: ignore[index]
            self._repeats = 0
        return self._counts

    @property
    def total(self) -> int:
        """This process's training FLOPs so far (under torchrun, its share of the job's)."""
        return sum(self.flops.get(key, 0) * count for key, count in self.counts.items())

    # Measuring one occurrence ---------------------------------------------------------------
    def _begin(self, key: Key) -> None:
        if key == self._settled:  # the step before's work again (every step at a fixed shape): compared, not hashed
            self._repeats += 1
            return
        counts = self.counts  # the repeats of the work before go in first
        counts[key] += 1
        if key in self.flops or self._mode is not None:
            if self.on_count is not None and 1 < counts[key] <= self.occurrences_apart:
                self.on_count()  # the occurrence after the counted one: a compiled forward compiles in it
            if key in self.flops and counts[key] >= self.occurrences_apart:
                self._settled = key  # nothing more to do for this work than count it
            return
        if self.on_count is not None:
            self.on_count()
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
        self._hooks = [model.register_forward_pre_hook(self._pre_forward)]  # one call per forward, none after it

    def before_forward(self, state: State, logger: Logger) -> None:
        self._in_step = True
        self._begin(("step", shapes_of(state.batch), (self._structure or self._new_structure())(state.model)))

    def after_backward(self, state: State, logger: Logger) -> None:
        self._end()
        self._in_step = False

    # Other forwards of the model during training (a method scoring samples) -----------------
    def _pre_forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self._in_step or self._in_eval:
            return
        structure = self._structure or self._new_structure()
        self._begin(("forward", shapes_of(args), torch.is_grad_enabled(), structure(module)))
        if self._mode is not None:  # counting this forward: end as it returns (or raises), once
            self._hooks.append(module.register_forward_hook(self._forward_counted, always_call=True))

    def _forward_counted(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self._end()
        self._hooks.pop().remove()

    # Evaluation is not counted --------------------------------------------------------------
    def eval_start(self, state: State, logger: Logger) -> None:
        self._in_eval = True

    def eval_end(self, state: State, logger: Logger) -> None:
        self._in_eval = False
        logger.log_metrics({"cost/flops": job_sum(self.total)})  # every rank evaluates: all take part

    def fit_end(self, state: State, logger: Logger) -> None:
        self.job_total = job_sum(self.total)
        logger.log_metrics(self.summary())

    def summary(self) -> dict[str, float]:
        """The job's training FLOPs (every rank's, once fit ended) and the distinct pieces of work counted here."""
        total = self.job_total if self.job_total is not None else float(self.total)
        return {"final/flops": total, "final/flop_shapes": float(len(self.flops))}

    def close(self, state: State, logger: Logger) -> None:
        self._end()  # a run that failed between BEFORE_FORWARD and AFTER_BACKWARD leaves no mode behind
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._structure is not None:
            self._structure.close()
            self._structure = None

    def _new_structure(self) -> _Structure:
        """At the first count of a fit (close() ends it)."""
        self._structure = _Structure()
        return self._structure
