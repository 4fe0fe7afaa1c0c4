"""Stochastic depth (Huang et al., 2016) as model surgery: residual blocks whose branch drops at random.

`apply_stochastic_depth` makes every residual block of the chosen kind stochastic: torchvision's
ResNet blocks in Composer's layout (a subclass carrying ``drop_rate``, the same state-dict keys),
others wrapped in a `StochasticBlock` (see `cadence_stochastic_depth.layers` for both and for the
residual contract). Torch only.
"""

from __future__ import annotations

import torch
from torch import nn

from cadence.ops.checks import ArgumentTypeError, check_choice, check_number
from cadence.ops.surgery import Policy, SurgeryReport, no_effect, replace_modules, unwrap_model
from cadence_stochastic_depth.layers import (
    KNOWN_BLOCKS,
    STOCHASTIC_METHODS,
    TORCHVISION_BLOCKS,
    StochasticBlock,
    is_stochastic,
    residual_parts,
    stochastic_resnet_block,
)

__all__ = [
    "DROP_DISTRIBUTIONS",
    "TARGET_LAYERS",
    "apply_stochastic_depth",
    "check_stochastic_depth_args",
    "layer_drop_rates",
    "set_drop_rates",
]

TARGET_LAYERS = {
    "ResNetBlock": ("BasicBlock", "Bottleneck"),
    "ResNetBottleneck": ("Bottleneck",),
    "ResNetBasicBlock": ("BasicBlock",),
}
"""Names of the known residual blocks -> the torchvision and timm classes they stand for."""
DROP_DISTRIBUTIONS = ("linear", "uniform")


def check_stochastic_depth_args(
    target_layer_name: str | type[nn.Module], stochastic_method: str, drop_rate: float, drop_distribution: str
) -> None:
    """Reject hyperparameters that cannot work, naming the argument and what is allowed."""
    if isinstance(target_layer_name, type):
        if not issubclass(target_layer_name, nn.Module):
            raise ArgumentTypeError(f"`target_layer_name`={target_layer_name!r} must be an nn.Module class")
    else:
        check_choice(
            "target_layer_name",
            target_layer_name,
            TARGET_LAYERS,
            hint="or your block's class, if it follows the residual contract (cadence_stochastic_depth.layers)",
        )
    check_choice("stochastic_method", stochastic_method, STOCHASTIC_METHODS)
    check_number("drop_rate", drop_rate, ge=0, le=1, hint="the probability of dropping the deepest block's branch")
    check_choice("drop_distribution", drop_distribution, DROP_DISTRIBUTIONS)


def layer_drop_rates(count: int, drop_rate: float, drop_distribution: str = "linear") -> list[float]:
    """The drop rate of each of `count` blocks, shallowest first: ``(i + 1) / count * drop_rate``
    (``'linear'``: early blocks extract the features every later one needs) or `drop_rate` for all."""
    if drop_distribution == "uniform":
        return [drop_rate] * count
    return [(index + 1) / count * drop_rate for index in range(count)]


def _is_target(module: nn.Module, target_layer_name: str | type[nn.Module]) -> bool:
    if is_stochastic(module):
        return False  # made stochastic already (a torchvision block's subclass is still an instance of its class)
    if isinstance(target_layer_name, type):
        return isinstance(module, target_layer_name)
    cls = type(module)
    return (cls.__module__, cls.__qualname__) in KNOWN_BLOCKS and cls.__qualname__ in TARGET_LAYERS[target_layer_name]


def apply_stochastic_depth(
    model: nn.Module,
    target_layer_name: str | type[nn.Module] = "ResNetBlock",
    stochastic_method: str = "block",
    drop_rate: float = 0.2,
    drop_distribution: str = "linear",
    *,
    generator: torch.Generator | None = None,
    strict: bool = False,
) -> SurgeryReport:
    """Make every `target_layer_name` block of `model` stochastic, in place.

    Deep networks train faster and generalise better when each step trains a random shallower
    network: the gradient reaches early layers through fewer blocks, and a dropped block costs
    nothing (Huang et al., 2016). At evaluation the full network runs, each branch scaled by its
    keep probability.

    Args:
        model: the network (a ``torch.compile``-d model is unwrapped; DDP is refused).
        target_layer_name: ``'ResNetBottleneck'`` (torchvision's and timm's ``Bottleneck``, Composer's
            name), ``'ResNetBasicBlock'`` (their ``BasicBlock``), ``'ResNetBlock'`` (both; the default,
            where Composer requires the argument), or a block class that follows the residual
            contract (its instances, subclasses included, are wrapped).
        stochastic_method: ``'block'`` drops a block's branch for the whole batch (and skips its
            compute); ``'sample'`` drops it per sample.
        drop_rate: the drop probability of the deepest block, in [0, 1].
        drop_distribution: ``'linear'``: block i of n (in module order) drops with probability
            ``(i + 1) / n * drop_rate``; ``'uniform'``: every block with `drop_rate`.
        generator: draws the drops (the global RNG when None); a CPU generator for ``'block'``, one on
            the model's device for ``'sample'``.
        strict: raise `NoEffectError` instead of warning `NoEffectWarning` when no block matched.

    Returns:
        The `SurgeryReport`. The blocks keep their parameters (same objects), so optimizers built
        before the surgery need no change. torchvision's ``BasicBlock``/``Bottleneck`` become
        `StochasticBasicBlock`/`StochasticBottleneck` (Composer's layout: the state-dict keys do not
        change, so a plain torchvision or a Composer checkpoint loads into the modified model); other
        blocks are wrapped in a `StochasticBlock`, and their keys gain a ``.block`` segment.
    """
    check_stochastic_depth_args(target_layer_name, stochastic_method, drop_rate, drop_distribution)
    target = unwrap_model(model)
    wrapped = {id(m.block) for m in target.modules() if isinstance(m, StochasticBlock)}
    blocks = [m for m in target.modules() if _is_target(m, target_layer_name) and id(m) not in wrapped]
    some_stochastic = any(is_stochastic(m) for m in target.modules())
    for block in blocks:
        residual_parts(block)  # every block fits the contract before any is replaced
    rates = dict(zip(map(id, blocks), layer_drop_rates(len(blocks), drop_rate, drop_distribution)))

    def policy(module: nn.Module, path: str) -> nn.Module | None:
        rate = rates.get(id(module))
        if rate is None:
            return None
        if (type(module).__module__, type(module).__qualname__) in TORCHVISION_BLOCKS:
            return stochastic_resnet_block(module, rate, stochastic_method, generator=generator)
        return StochasticBlock(module, rate, stochastic_method, generator=generator)

    if not blocks:
        return _nothing_to_wrap(target, target_layer_name, some_stochastic, strict)
    policies: dict[type[nn.Module], Policy] = {type(block): policy for block in blocks}
    return replace_modules(model, policies, method="StochasticDepth", strict=strict)


def _nothing_to_wrap(
    model: nn.Module, target_layer_name: str | type[nn.Module], some_wrapped: bool, strict: bool
) -> SurgeryReport:
    """Warn (or raise) naming the block looked for, and the known block the model has instead."""
    wanted = target_layer_name if isinstance(target_layer_name, str) else target_layer_name.__qualname__
    others = sorted({name for m in model.modules() for name in TARGET_LAYERS if _is_target(m, name)} - {wanted})
    message = f"StochasticDepth changed no module of {type(model).__name__}: it has no {wanted} block" + (
        " left to wrap (applied already)" if some_wrapped else ""
    )
    message += f"; it has {others[0]} blocks: pass target_layer_name={others[0]!r}" if others else ""
    no_effect(message, strict=strict, stacklevel=3)
    return SurgeryReport("StochasticDepth")


def set_drop_rates(model: nn.Module, drop_rate: float, drop_distribution: str = "linear") -> int:
    """Set the rates of the model's stochastic blocks (either layout, in module order) as
    `apply_stochastic_depth` would for `drop_rate` (e.g. during a warm-up); returns how many blocks there are."""
    check_number("drop_rate", drop_rate, ge=0, le=1)
    check_choice("drop_distribution", drop_distribution, DROP_DISTRIBUTIONS)
    layers = [m for m in unwrap_model(model).modules() if is_stochastic(m)]
    for layer, rate in zip(layers, layer_drop_rates(len(layers), drop_rate, drop_distribution)):
        layer.drop_rate = rate
    return len(layers)
