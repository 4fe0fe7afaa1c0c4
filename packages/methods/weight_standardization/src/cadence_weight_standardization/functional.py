"""Weight Standardization (Qiao et al., 2019) as functions on modules. Torch only.

Every convolution's weight is reparametrised with ``torch.nn.utils.parametrize``, as Composer
does: the trained Parameter stays the same object (optimizers keep it and its state), and
``conv.weight`` returns the standardized weight. The state-dict key of a standardized weight
becomes ``<conv>.parametrizations.weight.original``; `WeightStandardization` is recorded in
checkpoints, so a fresh model gets the same parametrizations before the weights load.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.nn.utils import parametrize

from cadence.ops.checks import check_int
from cadence.ops.modules import eval_mode
from cadence.ops.surgery import SurgeryReport, no_effect, unwrap_model
from cadence_weight_standardization.layers import WeightStandardizer

__all__ = [
    "CONVOLUTIONS",
    "apply_weight_standardization",
    "check_weight_standardization_args",
    "convolutions_in_execution_order",
    "is_standardized",
    "standardize_conv_weights",
]

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
"""The layers whose weights are standardized (subclasses included), as in Composer."""


def check_weight_standardization_args(n_last_layers_ignore: int) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_int(
        "n_last_layers_ignore",
        n_last_layers_ignore,
        ge=0,
        hint="the convolutions at the end of the network (in execution order) left as they are, e.g. a "
        "convolutional classification head",
    )


class _ConvolutionsAsLeaves(torch.fx.Tracer):
    """Records every convolution as one call, subclasses too (timm's StdConv2d calls F.conv2d itself),
    and never enters a module that holds no convolution: its forward cannot change the order, and a
    stateful one (GyroDropout's mask pool, drawn on its first call) must not run on the tracer's proxies."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        holds_convolution = any(isinstance(inner, CONVOLUTIONS) for inner in m.modules())
        return isinstance(m, CONVOLUTIONS) or not holds_convolution or super().is_leaf_module(m, module_qualified_name)


def convolutions_in_execution_order(module: nn.Module) -> tuple[list[str], bool]:
    """Paths of `module`'s convolutions in the order its forward calls them, and whether that order is sure.

    ``torch.fx`` traces the forward without running it, in eval mode (where forwards draw no random
    numbers and update no statistics; modules keep their own train/eval flags after). A forward it
    cannot trace (control flow on values, a batch tuple unpacked as `cadence.Classifier` does) is
    replaced by its children's orders in definition order: exact for a wrapper around one network, a guess when several
    children hold convolutions (the second value is then False). A convolution that a traced
    forward never calls is not listed (Composer counts the convolutions of the traced graph too).
    """
    if isinstance(module, CONVOLUTIONS):
        return [""], True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notices: only the order of the calls is used
            with eval_mode(module):
                graph = _ConvolutionsAsLeaves().trace(module)
    except Exception:  # any forward fx cannot trace: fall back to the children, one after the other
        paths: list[str] = []
        sure, holders = True, 0
        for name, child in module.named_children():
            inner, inner_sure = convolutions_in_execution_order(child)
            paths += [f"{name}.{path}" if path else name for path in inner]
            sure, holders = sure and inner_sure, holders + bool(inner)
        return paths, sure and holders <= 1
    called = dict.fromkeys(str(node.target) for node in graph.nodes if node.op == "call_module")
    return [path for path in called if isinstance(module.get_submodule(path), CONVOLUTIONS)], True


def is_standardized(conv: nn.Module) -> bool:
    """Whether `conv.weight` is already parametrised by a `WeightStandardizer`."""
    if not parametrize.is_parametrized(conv, "weight"):
        return False
    return any(isinstance(p, WeightStandardizer) for p in conv.get_submodule("parametrizations.weight").children())


def standardize_conv_weights(
    module: nn.Module, n_last_layers_ignore: int = 0, *, strict: bool = False
) -> SurgeryReport:
    """Standardize the weights of `module`'s convolutions but the last `n_last_layers_ignore`; see
    `apply_weight_standardization`. Returns the report (what `WeightStandardization` logs); nothing
    to change warns `NoEffectWarning` (``strict=True``: raises `NoEffectError`).
    """
    check_weight_standardization_args(n_last_layers_ignore)
    target = unwrap_model(module)
    paths, sure = convolutions_in_execution_order(target)
    if n_last_layers_ignore and not sure:
        warnings.warn(
            f"torch.fx could not trace {type(target).__name__}, so its convolutions are taken in definition "
            f"order: the {n_last_layers_ignore} left alone (n_last_layers_ignore) may not be the last ones the "
            "forward runs. To see why, try torch.fx.symbolic_trace on the model",
            UserWarning,
            stacklevel=3,
        )
    convs: dict[int, tuple[str, nn.Module]] = {}
    for path in paths:  # a convolution reachable under two paths counts once
        convs.setdefault(id(target.get_submodule(path)), (path, target.get_submodule(path)))
    chosen = list(convs.values())[: max(len(convs) - n_last_layers_ignore, 0)]
    report = SurgeryReport("WeightStandardization")
    for path, conv in chosen:
        if is_standardized(conv):
            continue  # a second application changes nothing
        kind = f"{type(conv).__name__} -> standardized weight"
        parametrize.register_parametrization(conv, "weight", WeightStandardizer())
        report.replaced.setdefault(kind, []).append(path or "<model>")
    if not report:
        message = (
            f"WeightStandardization changed no module of {type(target).__name__}: it has {len(convs)} "
            f"convolution(s), n_last_layers_ignore={n_last_layers_ignore} leaves {len(convs) - len(chosen)} alone "
            "and the others are standardized already"
        )
        no_effect(message, strict=strict, stacklevel=3)
    return report


def apply_weight_standardization(module: nn.Module, n_last_layers_ignore: int = 0) -> int:
    """Reparametrise every Conv1d/2d/3d weight of `module` to zero mean and unit variance per output channel.

    Composer's function: it returns the number of convolutions it standardized (0 on a second
    call, which changes nothing). `standardize_conv_weights` returns the full report.

    Args:
        module: changed in place. Optimizers built before keep working: the parameters stay the
            same objects. A ``torch.compile``-d model is changed through its original module.
        n_last_layers_ignore: the last convolutions in the order the forward runs them (traced with
            ``torch.fx``) that keep their plain weights: a convolutional classification head should
            not be standardized (Composer uses 15 for DeepLabv3+'s head).
    """
    return standardize_conv_weights(module, n_last_layers_ignore).count
