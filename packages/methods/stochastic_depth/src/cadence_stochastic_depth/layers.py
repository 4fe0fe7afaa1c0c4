"""Residual blocks whose residual branch is dropped at random while training.

Two layouts. torchvision's ResNet ``BasicBlock`` and ``Bottleneck`` become, in place of the block,
an instance of a subclass of their own class (`StochasticBasicBlock`, `StochasticBottleneck`, built
by `stochastic_resnet_block`) that carries ``drop_rate``: Composer's layout, so the state-dict keys
do not change (a plain torchvision or a Composer checkpoint loads), ``isinstance(m, Bottleneck)``
still holds, and the model compiles with ``torch.jit.script``. Every other block is wrapped in a
`StochasticBlock` (its keys gain a ``.block`` segment); both export with ``torch.export``.

**The residual contract.** A residual block computes ``act(shortcut(x) + branch(x))``; stochastic
depth needs its three parts. `residual_parts` finds them by the block's class:

* torchvision's and timm's ResNet ``BasicBlock`` and ``Bottleneck``: the branch is their conv-BN
  chain (conv1 ... bn2 or bn3, with timm's drop_block, aa, se and drop_path), the shortcut their
  ``downsample`` (the identity when None) and the activation their last one (``relu``, timm's
  ``act2`` or ``act3``). The class is recognised by its module and name, so neither library is
  imported here, and a subclass (which may change ``forward``) is not taken for its base.
* any other class: its instances hold the parts as attributes ``branch`` (a module or function,
  required), ``shortcut`` and ``act`` (optional; the identity when missing or None), and its
  ``forward`` computes ``act(shortcut(x) + branch(x))``. A block without ``branch`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard, cast

import torch
from torch import nn

from cadence.ops.checks import check_choice, check_number

__all__ = [
    "STOCHASTIC_METHODS",
    "ResidualParts",
    "StochasticBlock",
    "StochasticResNetBlock",
    "is_stochastic",
    "residual_parts",
    "stochastic_resnet_block",
]

STOCHASTIC_METHODS = ("block", "sample")


class ResidualParts(NamedTuple):
    """How to run a block's residual branch, and the attribute names of its shortcut and activation."""

    branch: Callable[[Any, torch.Tensor], torch.Tensor]
    shortcut: str
    act: str


def _torchvision_basic(b: Any, x: torch.Tensor) -> torch.Tensor:
    return b.bn2(b.conv2(b.relu(b.bn1(b.conv1(x)))))


def _torchvision_bottleneck(b: Any, x: torch.Tensor) -> torch.Tensor:
    return b.bn3(b.conv3(b.relu(b.bn2(b.conv2(b.relu(b.bn1(b.conv1(x))))))))


def _timm_tail(b: Any, x: torch.Tensor) -> torch.Tensor:
    x = x if b.se is None else b.se(x)
    return x if b.drop_path is None else b.drop_path(x)


def _timm_basic(b: Any, x: torch.Tensor) -> torch.Tensor:
    x = b.aa(b.act1(b.drop_block(b.bn1(b.conv1(x)))))
    return _timm_tail(b, b.bn2(b.conv2(x)))


def _timm_bottleneck(b: Any, x: torch.Tensor) -> torch.Tensor:
    x = b.act1(b.bn1(b.conv1(x)))
    x = b.aa(b.act2(b.drop_block(b.bn2(b.conv2(x)))))
    return _timm_tail(b, b.bn3(b.conv3(x)))


def _contract_branch(b: Any, x: torch.Tensor) -> torch.Tensor:
    return b.branch(x)


KNOWN_BLOCKS: dict[tuple[str, str], ResidualParts] = {
    ("torchvision.models.resnet", "BasicBlock"): ResidualParts(_torchvision_basic, "downsample", "relu"),
    ("torchvision.models.resnet", "Bottleneck"): ResidualParts(_torchvision_bottleneck, "downsample", "relu"),
    ("timm.models.resnet", "BasicBlock"): ResidualParts(_timm_basic, "downsample", "act2"),
    ("timm.models.resnet", "Bottleneck"): ResidualParts(_timm_bottleneck, "downsample", "act3"),
}
"""(module, class name) -> parts, for the residual blocks known by name (see the module docstring)."""
TORCHVISION_BLOCKS = {key for key in KNOWN_BLOCKS if key[0] == "torchvision.models.resnet"}
"""The blocks that get Composer's layout (`stochastic_resnet_block`) instead of a `StochasticBlock` wrapper."""


def residual_parts(block: nn.Module) -> ResidualParts:
    """The parts of `block` under the residual contract; a block that does not fit raises a TypeError."""
    cls = type(block)
    known = KNOWN_BLOCKS.get((cls.__module__, cls.__qualname__))
    if known is not None:
        return known
    if not callable(getattr(block, "branch", None)):
        raise TypeError(
            f"{cls.__qualname__} does not follow the residual contract of stochastic depth: its instances need a "
            "`branch` attribute (the residual branch, a module), with optional `shortcut` and `act`, and a forward "
            "computing act(shortcut(x) + branch(x)); add them, or wrap a torchvision/timm BasicBlock or Bottleneck"
        )
    return ResidualParts(_contract_branch, "shortcut", "act")


class StochasticBlock(nn.Module):
    """A residual block whose branch is dropped with probability `drop_rate` while training (Huang et al., 2016).

    ``y = act(shortcut(x) + keep * branch(x))``. In training, ``stochastic_method='block'`` skips
    the branch of the whole batch (keep = 0, the branch is not computed at all) with probability
    `drop_rate`, and ``'sample'`` draws keep in {0, 1} per sample (as Composer: no rescaling in
    training). In evaluation the branch is scaled by its expected keep, ``1 - drop_rate``,
    deterministically. A dropped block with an identity shortcut returns `x` itself, as Composer's
    does: in a ResNet `x` is the previous block's activated output, so ``act(x) == x``, and applying
    an in-place activation to the block's input would corrupt the previous block's saved output.

    Args:
        block: the residual block (see the residual contract in the module docstring); its
            parameters are kept as they are, so optimizers keep training them.
        drop_rate: the probability of dropping the branch, in [0, 1].
        stochastic_method: ``'block'`` or ``'sample'``.
        generator: draws the drops (the global RNG when None). ``'block'`` reads its draw on the
            host, so give it a CPU generator; ``'sample'`` draws its mask on the input's device.
    """

    def __init__(
        self,
        block: nn.Module,
        drop_rate: float = 0.2,
        stochastic_method: str = "block",
        *,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.parts = residual_parts(block)
        self.block = block
        self.drop_rate = check_number("drop_rate", drop_rate, ge=0, le=1)
        self.stochastic_method = check_choice("stochastic_method", stochastic_method, STOCHASTIC_METHODS)
        self.generator = generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block, parts = self.block, self.parts
        shortcut = getattr(block, parts.shortcut, None)
        identity = x if shortcut is None else shortcut(x)
        if not self.training:
            return self._act(identity + parts.branch(block, x) * (1.0 - self.drop_rate))
        if self.stochastic_method == "block":
            if bool(torch.rand((), generator=self.generator) < self.drop_rate):  # a host draw: no device sync
                return x if shortcut is None else self._act(identity)  # x: already activated (see the class doc)
            return self._act(identity + parts.branch(block, x))
        branch = parts.branch(block, x)
        draws = torch.rand((x.shape[0],) + (1,) * (branch.ndim - 1), generator=self.generator, device=branch.device)
        return self._act(identity + branch * (draws >= self.drop_rate).to(branch.dtype))

    def _act(self, y: torch.Tensor) -> torch.Tensor:
        act = getattr(self.block, self.parts.act, None)
        return y if act is None else act(y)

    # The current rate travels with the weights: a run resumed mid-warmup evaluates with it.
    def get_extra_state(self) -> dict[str, float]:
        return {"drop_rate": self.drop_rate}

    def set_extra_state(self, state: dict[str, float]) -> None:
        self.drop_rate = float(state["drop_rate"])

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:g}, stochastic_method={self.stochastic_method!r}"


class StochasticResNetBlock:
    """The forward of `StochasticBasicBlock` and `StochasticBottleneck`: `StochasticBlock`'s, computed
    by the torchvision block itself (``relu(downsample(x) + keep * branch(x))``).

    Its instances carry ``drop_rate`` (float), ``stochastic_method`` and ``generator`` as attributes,
    none of them in the state dict: the block's keys stay torchvision's. (No class annotations at run time:
    TorchScript would read them as strings.)
    """

    if TYPE_CHECKING:  # set per instance by stochastic_resnet_block
        drop_rate: float
        stochastic_method: str
        generator: torch.Generator | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        if self.downsample is not None:  # type: ignore[attr-defined]
            identity = self.downsample(x)  # type: ignore[attr-defined]
        if not self.training:  # type: ignore[attr-defined]
            return self.relu(identity + self._branch(x) * (1.0 - self.drop_rate))  # type: ignore[attr-defined]
        if self.stochastic_method == "block":
            if bool(torch.rand((), generator=self.generator) < self.drop_rate):  # a host draw: no device sync
                if self.downsample is None:  # type: ignore[attr-defined]
                    return x  # already activated (see StochasticBlock)
                return self.relu(identity)  # type: ignore[attr-defined]
            return self.relu(identity + self._branch(x))  # type: ignore[attr-defined]
        branch = self._branch(x)  # type: ignore[attr-defined]
        shape = [x.shape[0]] + [1] * (branch.dim() - 1)
        draws = torch.rand(shape, generator=self.generator, device=branch.device)
        return self.relu(identity + branch * (draws >= self.drop_rate).to(branch.dtype))  # type: ignore[attr-defined]

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:g}, stochastic_method={self.stochastic_method!r}"


class _BasicBlockBranch(StochasticResNetBlock):
    def _branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))  # type: ignore[attr-defined]


class _BottleneckBranch(StochasticResNetBlock):
    def _branch(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))  # type: ignore[attr-defined]
        x = self.relu(self.bn2(self.conv2(x)))  # type: ignore[attr-defined]
        return self.bn3(self.conv3(x))  # type: ignore[attr-defined]


_RESNET_CLASSES = {
    "StochasticBasicBlock": ("BasicBlock", _BasicBlockBranch),
    "StochasticBottleneck": ("Bottleneck", _BottleneckBranch),
}


def __getattr__(name: str) -> type[nn.Module]:
    """`StochasticBasicBlock` and `StochasticBottleneck`, built on first use (torchvision is imported then,
    never at import of this package; not in ``__all__`` for that reason); found here by name, so models
    holding them pickle and deep-copy."""
    if name in globals():
        return globals()[name]
    if name not in _RESNET_CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from torchvision.models import resnet

    base, branch = _RESNET_CLASSES[name]
    doc = f"torchvision's ``{base}`` with stochastic depth, Composer's layout (see `StochasticResNetBlock`)."
    cls = type(name, (branch, getattr(resnet, base)), {"__module__": __name__, "__qualname__": name, "__doc__": doc})
    globals()[name] = cls
    return cls


def stochastic_resnet_block(
    block: nn.Module,
    drop_rate: float = 0.2,
    stochastic_method: str = "block",
    *,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """A stochastic copy of a torchvision ``BasicBlock`` or ``Bottleneck`` holding the same submodules,
    parameters and buffers (nothing is copied): an instance of `StochasticBasicBlock` or
    `StochasticBottleneck`, with the state-dict keys of `block`. Arguments as `StochasticBlock`'s."""
    cls = type(block)
    if (cls.__module__, cls.__qualname__) not in TORCHVISION_BLOCKS:
        raise TypeError(f"stochastic_resnet_block takes torchvision's BasicBlock or Bottleneck, not {cls.__qualname__}")
    new = object.__new__(__getattr__(f"Stochastic{cls.__qualname__}"))
    new.__dict__.update({k: v.copy() if isinstance(v, dict) else v for k, v in block.__dict__.items()})
    stochastic = cast(StochasticResNetBlock, new)  # __getattr__ built its class on StochasticResNetBlock
    stochastic.drop_rate = check_number("drop_rate", drop_rate, ge=0, le=1)
    stochastic.stochastic_method = check_choice("stochastic_method", stochastic_method, STOCHASTIC_METHODS)
    stochastic.generator = generator
    return new


def is_stochastic(module: nn.Module) -> TypeGuard[StochasticBlock | StochasticResNetBlock]:
    """Whether `module` is a stochastic-depth block of either layout."""
    return isinstance(module, (StochasticBlock, StochasticResNetBlock))
