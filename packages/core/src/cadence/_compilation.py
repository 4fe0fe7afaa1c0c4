"""The module a training step calls: the model, wrapped for DDP, then ``torch.compile``'d if asked.

``Trainer(compile_config={...})`` is Composer's argument: ``torch.compile``'s keyword arguments (``{}``
for its defaults). The trainer compiles the forward module (after surgery, loading and the DDP wrap,
as Composer does) and the model's ``loss``, each as its own graph, so the methods that run between
the forward and the loss (AFTER_FORWARD, BEFORE_LOSS) still see and change eager tensors.

``state.model`` itself is never compiled in place: methods deep-copy it (EMA, SWA) and surgery
replaces its modules, and a copy of an in-place compiled module would keep calling the original.
Shape changes (progressive resizing, ColOut, selective backprop) recompile; with ``dynamic`` unset,
``torch.compile`` marks a changing dimension dynamic on the first recompile, so a run compiles a
handful of graphs, not one per size. `CompiledStep.graphs` counts them; the trainer logs the count as
``trainer/compiled_graphs`` when a fit ends.
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

__all__ = ["CompiledStep", "check_compile_config", "distributed_module"]

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
        self.forward: nn.Module = torch.compile(forward_module, **compile_config)  # type: ignore[assignment]
        self._loss = torch.compile(loss, **compile_config)
        self._graphs_before = _unique_graphs()

    def loss(self, outputs: Any, batch: Any) -> Any:
        """The compiled loss. Tracing it reads ``.grad`` of the outputs (not leaves), which makes torch warn
        at every (re)compile about something no user code did; that one warning is silenced here."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NON_LEAF_GRAD_WARNING, category=UserWarning)
            return self._loss(outputs, batch)

    def graphs(self) -> int:
        """Graphs compiled in this process since this step was built (recompiles included)."""
        return _unique_graphs() - self._graphs_before


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters  # imported with torch.compile already

    return int(counters["stats"]["unique_graphs"])
