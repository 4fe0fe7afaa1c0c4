"""Model surgery: replace modules by a policy and keep the run consistent. Torch only.

`replace_modules(model, {nn.Conv2d: make_blur_conv}, optimizers=...)` replaces every module whose
type is exactly a key by what the policy returns for it (None leaves it alone). Each replacement
is marked with the method that made it, and a later call by the same method does not enter it,
so applying a method twice changes nothing (a wrapper keeps the module it wraps inside it).
What surgery must never break is kept:

* **weights, device, dtype, memory format, mode.** A policy builds the new module from the old one
  (it may reuse the old module's parameters); the result is moved to the old module's device and
  dtype (a module without tensors, such as a pooling layer, takes those of its nearest enclosing
  module that has some, so a filter buffer the new module brings lands on the model's device), 4-D
  weights follow a ``channels_last`` original, and it takes the old module's train/eval mode (a model
  changed in eval mode must not start applying dropout).
* **optimizers.** A parameter the new module still holds (the same object) keeps its place and
  its state. One the new module holds under the same name and shape in place of the old one
  takes over its place and state (momentum, Adam moments). New parameters join the old module's
  parameter group; parameters that are gone leave it, with their state.
* **wrappers.** A ``torch.compile``-d model is unwrapped (the compiled module recompiles); a model
  already wrapped in ``DistributedDataParallel`` is refused with the fix.

The `SurgeryReport` says what changed (counts by type and the module paths). Nothing matched
warns `NoEffectWarning` (``strict=True`` raises `NoEffectError` instead): a method that silently
does nothing on a model is a wasted run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import torch
from torch import nn

__all__ = [
    "NoEffectError",
    "NoEffectWarning",
    "Policy",
    "SurgeryReport",
    "count_module_instances",
    "no_effect",
    "policy_for",
    "replace_modules",
    "unwrap_model",
]

Policy = Callable[[nn.Module, str], nn.Module | None]
"""``policy(module, path) -> replacement`` (or None to leave this module as it is)."""

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def policy_for(module_type: type[ModuleT], policy: Callable[[ModuleT, str], nn.Module | None]) -> Policy:
    """`policy`, written for the modules of `module_type`, as the `Policy` of that key:
    ``{nn.Conv2d: policy_for(nn.Conv2d, blur_conv)}``, where ``blur_conv`` takes an ``nn.Conv2d``."""
    return cast(Policy, policy)  # replace_modules calls a key's policy on modules of exactly that type only


class NoEffectWarning(UserWarning):
    """A surgery method found nothing to change on this model."""


class NoEffectError(ValueError):
    """A surgery method with ``strict=True`` found nothing to change on this model."""


def no_effect(message: str, *, strict: bool, stacklevel: int = 2) -> None:
    """Say that a surgery changed nothing: `NoEffectError` with `strict`, else a `NoEffectWarning`.

    `stacklevel` counts as for `warnings.warn` called in the caller's place (2: the caller's caller,
    usually the user's line that called the ``apply_*`` function).
    """
    if strict:
        raise NoEffectError(message)
    warnings.warn(message, NoEffectWarning, stacklevel=stacklevel + 1)


@dataclass
class SurgeryReport:
    """What a surgery changed: ``replaced["Conv2d -> BlurConv2d"] == ["layer1.0.conv1", ...]``."""

    method: str
    replaced: dict[str, list[str]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(paths) for paths in self.replaced.values())

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, old: nn.Module, new: nn.Module, path: str) -> None:
        kind = f"{type(old).__name__} -> {type(new).__name__}"
        self.replaced.setdefault(kind, []).append(path or "<model>")

    def counts(self) -> dict[str, int]:
        """``{"<method>/Conv2d -> BlurConv2d": 8, ...}``: how many modules of each kind were replaced."""
        return {f"{self.method}/{kind}": len(paths) for kind, paths in self.replaced.items()}

    def hyperparameters(self) -> dict[str, int]:
        """`counts` under keys every logger takes as they are (``"BlurPool/Conv2d to BlurConv2d"``: MLflow
        refuses the ``>`` of ``->``)."""
        return {key.replace(" -> ", " to "): count for key, count in self.counts().items()}

    def __str__(self) -> str:
        if not self:
            return f"{self.method} changed no module"
        parts = ", ".join(f"{len(paths)} {kind}" for kind, paths in self.replaced.items())
        return f"{self.method} replaced {self.count} modules: {parts}"


def count_module_instances(model: nn.Module, module_class: type[nn.Module] | tuple[type[nn.Module], ...]) -> int:
    """How many modules of `model` (itself included) are instances of `module_class` (Composer's name)."""
    return sum(isinstance(module, module_class) for module in model.modules())


_MARK = "_cadence_replaced_by"  # on each replacement: the methods that made it (so that none repeats itself)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module to operate on: a ``torch.compile``-d model's original module; DDP is refused."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        raise TypeError(
            "model surgery needs the model before it is wrapped in DistributedDataParallel (DDP registers the "
            "parameters it synchronises when it is built). Apply the surgery to the unwrapped model, then wrap "
            "it; cadence.Trainer does this for you (surgery runs at INIT, DDP wraps after loading)"
        )
    original = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    return original if isinstance(original, nn.Module) else model


def _placement(module: nn.Module) -> tuple[torch.device | None, torch.dtype | None, bool]:
    """(device, floating dtype, channels_last) of a module, from its parameters and buffers."""
    tensors = [*module.parameters(recurse=True), *module.buffers(recurse=True)]
    floating = [t for t in tensors if t.is_floating_point()]
    device = tensors[0].device if tensors else None
    dtype = floating[0].dtype if floating else None
    fours = [t for t in tensors if t.ndim == 4]
    channels_last = bool(fours) and all(
        t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous() for t in fours
    )
    return device, dtype, channels_last


def _place(new: nn.Module, old: nn.Module, target: nn.Module, path: str) -> nn.Module:
    device, dtype, channels_last = _placement(old)
    while device is None and path:  # a module without tensors (MaxPool2d, ReLU): where its model lives
        path = path.rpartition(".")[0]
        device, dtype, _ = _placement(target.get_submodule(path) if path else target)
    if device is not None or dtype is not None:
        new = new.to(device=device, dtype=dtype)
    if channels_last:
        new = new.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return new.train(old.training)


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, module)


def _as_optimizers(optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None) -> list[Any]:
    if optimizers is None:
        return []
    return [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)


def _rebind(optimizers: Iterable[torch.optim.Optimizer], old: nn.Module, new: nn.Module) -> None:
    """Update param groups and state for `old` replaced by `new` (see the module docstring)."""
    kept = {id(p) for p in new.parameters()}
    new_named = dict(new.named_parameters())
    successor = {
        id(p): new_named[name]
        for name, p in old.named_parameters()
        if id(p) not in kept and name in new_named and new_named[name].shape == p.shape
    }
    owned = {id(p) for p in old.parameters()}
    gone = owned - kept
    for optimizer in optimizers:
        present = {id(p) for group in optimizer.param_groups for p in group["params"]}
        home = next((g for g in optimizer.param_groups if any(id(p) in owned for p in g["params"])), None)
        for group in optimizer.param_groups:
            params = []
            for p in group["params"]:
                if id(p) not in gone:
                    params.append(p)
                    continue
                replacement = successor.get(id(p))
                state = optimizer.state.pop(p, None)
                if replacement is not None:
                    params.append(replacement)
                    if state is not None:
                        optimizer.state[replacement] = state
            group["params"] = params
        if home is None:
            continue  # this optimizer does not train the replaced module
        taken = present | {id(p) for p in successor.values()}
        home["params"].extend(p for p in new.parameters() if id(p) not in taken and p.requires_grad)


def replace_modules(
    model: nn.Module,
    policies: Mapping[type[nn.Module], Policy],
    *,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    method: str = "surgery",
    strict: bool = False,
) -> SurgeryReport:
    """Replace every module whose exact type is a key of `policies` by the policy's result; see the module
    docstring for what is kept. Returns the report; warns (or with `strict`, raises) when nothing changed.

    A module reachable under several paths is replaced once, everywhere. The model itself is never
    replaced (only its submodules).
    """
    target = unwrap_model(model)
    report = SurgeryReport(method)
    done: dict[int, nn.Module] = {}
    replaced_paths: list[str] = []  # replaced now, or earlier by the same method: never entered again
    for path, module in list(target.named_modules(remove_duplicate=False)):
        if not path or any(path.startswith(parent + ".") for parent in replaced_paths):
            continue  # the model itself, or inside a module already replaced
        if method in getattr(module, _MARK, ()):
            replaced_paths.append(path)
            continue
        if id(module) in done:
            _set_submodule(target, path, done[id(module)])
            continue
        policy = policies.get(type(module))
        replacement = policy(module, path) if policy is not None else None
        if replacement is None or replacement is module:
            continue
        replacement = _place(replacement, module, target, path)
        object.__setattr__(replacement, _MARK, frozenset(getattr(replacement, _MARK, ())) | {method})
        _set_submodule(target, path, replacement)
        _rebind(_as_optimizers(optimizers), module, replacement)
        done[id(module)] = replacement
        replaced_paths.append(path)
        report.add(module, replacement, path)
    if not report:
        message = (
            f"{method} changed no module of {type(target).__name__}: none matched "
            f"({', '.join(kind.__name__ for kind in policies) or 'no policy'} with the given settings). "
            "Check the method's settings (e.g. min_channels) and that the model has such layers"
        )
        no_effect(message, strict=strict, stacklevel=3)
    return report
