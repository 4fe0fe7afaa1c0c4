"""Helpers for methods that run the model themselves (a scoring pass, a second forward). Torch only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

__all__ = ["eval_mode"]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode inside the block (BatchNorm statistics and dropout untouched), then every module's
    own train/eval flag back, so modules a user froze in eval mode stay frozen."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training
