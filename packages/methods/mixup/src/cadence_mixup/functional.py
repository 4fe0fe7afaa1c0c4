"""MixUp as pure tensor functions (Zhang et al., 2018, https://arxiv.org/abs/1710.09412)."""

from __future__ import annotations

import numbers
from typing import Any

import torch

from cadence.ops.checks import check_number
from cadence.ops.mixing import mix_with_permutation, random_permutation
from cadence.ops.sampling import sample_beta

__all__ = ["check_alpha", "mixup_batch", "sample_mixing"]


def mixup_batch(
    input: torch.Tensor,
    target: torch.Tensor,
    mixing: float | None = None,
    alpha: float = 0.2,
    indices: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Mix every example with another example of the same batch.

    ``mixed_input = (1 - mixing) * input + mixing * input[indices]``, with one coefficient and one
    permutation for the whole batch, shared by inputs and targets. The matching target is
    ``(1 - mixing) * onehot(target) + mixing * onehot(target_perm)``; for cross-entropy the loss
    ``(1 - mixing) * loss(target) + mixing * loss(target_perm)`` is the same number.

    Args:
        input: floating-point inputs ``(N, ...)``.
        target: targets ``(N, ...)`` (class indices, one-hot or any dense targets); only permuted here.
        mixing: the weight of the permuted examples, in [0, 1]. When None it is drawn:
            ``λ ~ Beta(alpha, alpha)`` and ``mixing = min(λ, 1 - λ)`` <= 0.5, so the original example
            always dominates and training accuracy against the original labels stays meaningful.
        alpha: the Beta concentration, > 0. Small values mix little (most draws land near 0);
            ``alpha = 1`` draws λ uniformly. Unused when `mixing` is given.
        indices: the permutation, an integer tensor ``(N,)``; drawn uniformly when None. A batch of
            one example is mixed with itself, which leaves it unchanged.
        generator: the source of every random draw (the global RNG when None).

    Returns:
        ``(mixed_input, target_perm, mixing)`` with ``target_perm = target[indices]`` and `mixing`
        a Python float.

    Raises:
        ValueError: `alpha` <= 0, `mixing` outside [0, 1], or `indices` of the wrong shape.
        TypeError: `input` is not a floating-point tensor, or `mixing` is not a number.
    """
    check_alpha(alpha)
    if not isinstance(input, torch.Tensor) or not input.is_floating_point():
        kind = input.dtype if isinstance(input, torch.Tensor) else type(input).__name__
        raise TypeError(f"`input` must be a floating-point tensor, got {kind}; convert images to float first")
    if mixing is None:
        mixing = sample_mixing(alpha, generator)
    _check_mixing(mixing)
    if indices is None:
        indices = random_permutation(input.shape[0], input.device, generator)
    elif indices.shape != (input.shape[0],):
        raise ValueError(f"`indices` must have shape ({input.shape[0]},), got {tuple(indices.shape)}")
    mixed = mix_with_permutation(input, indices, float(mixing))
    return mixed, target[indices], float(mixing)


def sample_mixing(alpha: float, generator: torch.Generator | None = None) -> float:
    """``min(λ, 1 - λ)`` with ``λ ~ Beta(alpha, alpha)``, drawn on the generator's device (the default RNG's
    when None) and returned as a Python float: on an accelerator, draw it with a CPU generator."""
    source = generator if generator is not None else torch.default_generator
    concentration = torch.tensor(float(alpha), dtype=torch.float64, device=source.device)
    draw = float(sample_beta(concentration, concentration, source))
    return min(draw, 1.0 - draw)


def check_alpha(alpha: Any) -> float:
    """`alpha` as a float: a finite number > 0, or a ValueError naming it."""
    return check_number("alpha", alpha, gt=0, hint="small values (0.2) mix little, 1.0 mixes uniformly")


def _check_mixing(mixing: Any) -> None:
    if isinstance(mixing, bool) or not isinstance(mixing, numbers.Real):
        raise TypeError(f"`mixing` must be a number in [0, 1] or None, got {mixing!r}")
    if not 0.0 <= float(mixing) <= 1.0:
        raise ValueError(f"`mixing` must be in [0, 1], got {mixing!r}")
