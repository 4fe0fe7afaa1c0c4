"""`StochasticBlock`: a residual block whose residual branch is dropped at random while training.

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
from typing import Any, NamedTuple

import torch
from torch import nn

from cadence.ops.checks import check_choice, check_number

__all__ = ["STOCHASTIC_METHODS", "ResidualParts", "StochasticBlock", "residual_parts"]

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
