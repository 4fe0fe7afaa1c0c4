"""Pair-mixing primitives shared by label-mixing methods (MixUp, CutMix, ...). Torch only.

Each sample is paired with ``indices[i]`` of a random permutation of its batch, and a weight
says how much of the partner goes into the mix: ``(1 - weight) * own + weight * partner``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["interpolate_loss", "mix_with_permutation", "random_permutation"]


def random_permutation(num_samples: int, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """A permutation of ``range(num_samples)`` on `device`, drawn on the generator's own device."""
    if generator is None:
        return torch.randperm(num_samples, device=device)
    return torch.randperm(num_samples, generator=generator, device=generator.device).to(device)


def mix_with_permutation(tensor: torch.Tensor, indices: torch.Tensor, weight: float) -> torch.Tensor:
    """``(1 - weight) * tensor + weight * tensor[indices]``, in the tensor's dtype and memory format."""
    return (1.0 - weight) * tensor + weight * tensor[indices]


def interpolate_loss(loss: Any, other: Any, weight: float) -> Any:
    """``(1 - weight) * loss + weight * other`` for a loss tensor, or each entry of a dict or sequence."""
    if isinstance(loss, dict):
        return {key: interpolate_loss(value, other[key], weight) for key, value in loss.items()}
    if isinstance(loss, (list, tuple)):
        return type(loss)(interpolate_loss(a, b, weight) for a, b in zip(loss, other))
    return (1.0 - weight) * loss + weight * other
