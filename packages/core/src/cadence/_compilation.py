"""The module a training step calls: the model, wrapped for DDP, then ``torch.compile``'d if asked.

``Trainer(compile_config={...})`` is Composer's argument: ``torch.compile``'s keyword arguments (``{}``
for its defaults). The trainer compiles the forward module (after surgery, loading and the DDP wrap,
as Composer does) and the model's ``loss``, each as its own graph, so the methods that run between
the forward and the loss (AFTER_FORWARD, BEFORE_LOSS) still see and change eager tensors.

``state.model`` itself is never compiled in place: methods deep-copy it (EMA, SWA) and surgery
replaces its modules, and a copy of an in-place compiled module would keep calling the original.
Shape changes (progressive resizing, ColOut, selective backprop) recompile; with ``dynamic`` unset,
``torch.compile`` marks a changing dimension dynamic on the first recompile, so a run compiles a
handful of graphs, not one per size.

Dynamo cannot trace while a ``TorchDispatchMode`` is active (a FLOP counter such as
``torch.utils.flop_counter.FlopCounterMode``, an operation counter, a debugging mode), and torch up to 2.13
(2.11 and 2.13 checked; 2.14 no longer does) marks code it first meets under one as *never to be compiled*:
one FLOP-counted first step left a whole run, and every later run of the process, eager. So each compiled
call checks the dispatch-mode stack (one C call) and runs the eager module or loss while a mode is active; the
compile happens at the first step without one.

With CUDA graphs (``mode="reduce-overhead"``) a graph's outputs live in memory the next replay overwrites, and
torch raises when an overwritten output is read. The loss outlives its step (the loggers read it back in the
background, the non-finite check every 50 steps), so the compiled loss is cloned: one small kernel per step.

A compile that silently does nothing is the failure to guard against: with ``TORCH_COMPILE_DISABLE=1`` in the
environment ``torch.compile`` returns a wrapper that runs eagerly, and timings then say nothing about compiled
code. `CompiledStep` warns when it is built in such a process and, after the first step, when the process has
compiled no graph at all. `CompiledStep.report` (``trainer.compiled.report()``) counts what this run compiled:
graphs (recompiles included), graph breaks and CUDA-graph skips (``mode="reduce-overhead"``: a skipped CUDA
graph means the host launches every kernel again); the trainer logs it when a fit ends.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cadence.algorithm import as_algorithm

__all__ = ["CompiledStep", "EagerUnderDispatchMode", "check_compile_config", "compile_disabled", "distributed_module"]

_NON_LEAF_GRAD_WARNING = "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed"


def check_compile_config(compile_config: Any) -> dict[str, Any] | None:
    """None (no compile) or a dict of ``torch.compile`` keyword arguments; anything else is refused."""
    if compile_config is None:
        return None
    if not isinstance(compile_config, Mapping):
        raise TypeError(
            f"compile_config={compile_config!r}: pass a dict of torch.compile arguments ({{}} for its defaults, "
            "e.g. {'mode': 'max-autotune'}), or None not to compile"
        )
    allowed = set(inspect.signature(torch.compile).parameters) - {"model"}
    unknown = sorted(set(compile_config) - allowed)
    if unknown:
        raise ValueError(f"compile_config has keys torch.compile does not take: {unknown}; it takes {sorted(allowed)}")
    return dict(compile_config)


def distributed_module(model: nn.Module, algorithms: Sequence[Any], device: torch.device, world_size: int) -> nn.Module:
    """`model` itself on one process; wrapped in DDP (after surgery and loading: DDP broadcasts rank 0's
    weights) on several, finding unused parameters if a method asks for it."""
    if world_size <= 1:
        return model
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=any(as_algorithm(a).find_unused_parameters for a in algorithms),
    )


class CompiledStep:
    """``torch.compile`` of the forward module and of the model's loss (see the module docstring)."""

    def __init__(self, forward_module: nn.Module, loss: Callable[..., Any], compile_config: dict[str, Any]):
        if compile_disabled():
            warnings.warn(_DISABLED.format(compile_config), stacklevel=3)
        compiled_forward = torch.compile(forward_module, **compile_config)
        self.forward = EagerUnderDispatchMode(compiled_forward, forward_module)
        self._loss = EagerUnderDispatchMode(torch.compile(loss, **compile_config), loss)
        self._config = compile_config
        self._before = _counts()

    def loss(self, outputs: Any, batch: Any) -> Any:
        """The compiled loss (a copy of it, where CUDA graphs would overwrite it)."""
        loss = self._loss(outputs, batch)
        if self._loss.last_call_compiled:  # a CUDA graph's output is overwritten by the next replay: keep a copy
            loss = _cloned(loss)
        first_compiled_step = self._loss.last_call_compiled and self._loss.compiled_calls == 1
        if first_compiled_step and not compile_disabled() and _counts()["graphs_in_process"] == 0:
            warnings.warn(_NOTHING_COMPILED.format(self._config), stacklevel=2)
        return loss

    def report(self) -> dict[str, float]:
        """What this step compiled since it was built: ``trainer/compiled_graphs``, ``trainer/graph_breaks``,
        ``trainer/cudagraph_skips``, ``trainer/eager_calls`` (forward calls made eagerly because a dispatch
        mode was active), and ``trainer/compile_disabled`` (1 when torch.compile ran nothing)."""
        now = _counts()
        return {
            "trainer/compiled_graphs": now["graphs_in_process"] - self._before["graphs_in_process"],
            "trainer/graph_breaks": now["graph_breaks"] - self._before["graph_breaks"],
            "trainer/cudagraph_skips": now["cudagraph_skips"] - self._before["cudagraph_skips"],
            "trainer/eager_calls": float(self.forward.eager_calls),
            "trainer/compile_disabled": float(compile_disabled()),
        }


class EagerUnderDispatchMode:
    """Calls `compiled`, or `eager` while a ``TorchDispatchMode`` is active (see the module docstring);
    attributes (DDP's ``no_sync``) are the compiled callable's."""

    def __init__(self, compiled: Callable[..., Any], eager: Callable[..., Any]):
        self.compiled, self.eager = compiled, eager
        self.compiled_calls = self.eager_calls = 0
        self.last_call_compiled = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.last_call_compiled = not torch._C._len_torch_dispatch_stack()
        if not self.last_call_compiled:
            self.eager_calls += 1
            return self.eager(*args, **kwargs)
        self.compiled_calls += 1
        # Tracing reads ``.grad`` of its non-leaf inputs (the loss's outputs, the activations a frame resumes from
        # after a graph break), which makes torch warn at every (re)compile about something no user code did
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NON_LEAF_GRAD_WARNING, category=UserWarning)
            return self.compiled(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # only for names not set in __init__
        if name in ("compiled", "eager"):  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.compiled, name)


_DISABLED = (
    "compile_config={} was given, but torch.compile is disabled in this process (TORCH_COMPILE_DISABLE=1 in the "
    "environment, or torch._dynamo.config.disable = True): the forward and the loss run eagerly. Unset it to compile"
)
_NOTHING_COMPILED = (
    "compile_config={}: the first training step compiled no graph and this process has none, so it ran eagerly; "
    "set TORCH_LOGS=graph_breaks,recompiles to see why Dynamo skipped the forward and the loss"
)


def _cloned(loss: Any) -> Any:
    """`loss` with every tensor cloned (a tensor, or a sequence or mapping of them, as `total_loss` takes)."""
    if isinstance(loss, torch.Tensor):
        return loss.clone()
    if isinstance(loss, Mapping):
        return {key: _cloned(value) for key, value in loss.items()}
    if isinstance(loss, tuple) and hasattr(loss, "_fields"):  # a namedtuple takes its fields as arguments
        return type(loss)(*(_cloned(value) for value in loss))
    if isinstance(loss, (list, tuple)):
        return type(loss)(_cloned(value) for value in loss)
    return loss


def compile_disabled() -> bool:
    """True when ``torch.compile`` returns functions that run eagerly (``TORCH_COMPILE_DISABLE=1``)."""
    return bool(getattr(torch._dynamo.config, "disable", False))


def _counts() -> dict[str, float]:
    """Dynamo's and Inductor's process-wide counters that say whether compiled code can have run."""
    from torch._dynamo.utils import counters  # imported with torch.compile already

    return {
        "graphs_in_process": float(counters["stats"]["unique_graphs"]),
        "graph_breaks": float(sum(counters["graph_break"].values())),
        "cudagraph_skips": float(counters["inductor"]["cudagraph_skips"]),
    }
