"""Seedable Gamma, Beta and Dirichlet sampling on the generator's device (MixUp, CutMix, AugMix).

torch.distributions cannot take a torch.Generator, so these sample with a fixed number of
vectorised rejection rounds: no Python loop over samples, no host synchronisation. Torch only.
"""

from __future__ import annotations

import torch

__all__ = ["sample_beta", "sample_dirichlet", "sample_gamma", "sample_log_gamma"]

_GAMMA_ROUNDS = 16  # Marsaglia-Tsang accepts >= 95% per round for shape >= 1; 16 rounds fail with p < 1e-20


def sample_log_gamma(concentration: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """log of Gamma(concentration, 1) samples, one per element (Marsaglia and Tsang, 2000).

    Shapes below 1 use ``log Gamma(a) = log Gamma(a + 1) + log(U) / a``. Working in log space
    keeps tiny shapes exact: for a = 0.001 the sample itself underflows float32 most of the time.
    `generator` None draws from torch's global RNG.
    """
    if not isinstance(concentration, torch.Tensor) or not concentration.is_floating_point():
        raise TypeError("concentration must be a floating-point tensor")
    a = concentration
    boost = a < 1
    d = torch.where(boost, a + 1, a) - 1.0 / 3.0
    c = torch.rsqrt(9.0 * d)
    rounds = (_GAMMA_ROUNDS, *a.shape)
    x = torch.randn(rounds, generator=generator, device=a.device, dtype=a.dtype)
    u = torch.rand(rounds, generator=generator, device=a.device, dtype=a.dtype)
    v = (1 + c * x) ** 3
    log_v = torch.log(v.clamp_min(torch.finfo(a.dtype).tiny))
    accept = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * log_v)
    first = accept.to(torch.uint8).argmax(dim=0, keepdim=True)  # first accepted round (0 if none)
    log_sample = torch.log(d) + torch.gather(log_v, 0, first).squeeze(0)
    log_sample = torch.where(accept.any(dim=0), log_sample, torch.log(d))  # never reached in practice
    u_boost = torch.rand(a.shape, generator=generator, device=a.device, dtype=a.dtype)
    log_u = torch.log(u_boost.clamp_min(torch.finfo(a.dtype).tiny))
    return torch.where(boost, log_sample + log_u / a, log_sample)


def sample_gamma(concentration: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Gamma(concentration, 1) samples, one per element (may underflow to 0 for shapes << 1)."""
    return sample_log_gamma(concentration, generator).exp()


def sample_beta(alpha: torch.Tensor, beta: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Beta(alpha, beta) samples, elementwise: ``sigmoid(log Ga - log Gb)``, exact for tiny shapes."""
    alpha, beta = torch.broadcast_tensors(alpha, beta)
    logs = sample_log_gamma(torch.stack([alpha, beta]), generator)
    return torch.sigmoid(logs[0] - logs[1])


def sample_dirichlet(concentration: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Dirichlet samples over the last dimension of `concentration`: a softmax of log-gammas."""
    return torch.softmax(sample_log_gamma(concentration, generator), dim=-1)
