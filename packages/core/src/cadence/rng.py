"""Explicit, per-component random number generators.

Methods never draw from the global RNG: each owns a `torch.Generator` on the training
device, seeded from the run's seed and the method's name, and stores its state in its
``state_dict`` so that a resumed run draws the very same numbers.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = [
    "MethodRNG",
    "derive_seed",
    "generator_state",
    "new_generator",
    "sample_beta",
    "sample_dirichlet",
    "sample_gamma",
    "sample_log_gamma",
    "set_generator_state",
]


def derive_seed(root_seed: int, *keys: str | int) -> int:
    """A 63-bit seed that depends on `root_seed` and `keys` only (stable across processes)."""
    text = ":".join(str(k) for k in (root_seed, *keys)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2**63 - 1)


def new_generator(device: torch.device | str, seed: int) -> torch.Generator:
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(seed)
    return generator


def generator_state(generator: torch.Generator) -> torch.Tensor:
    return generator.get_state()


def set_generator_state(generator: torch.Generator, state: torch.Tensor) -> None:
    generator.set_state(state.cpu() if isinstance(state, torch.Tensor) else torch.as_tensor(state))


class MethodRNG:
    """A method's own generator: created on the training device at INIT, seeded from the run.

    The seed is ``seed`` when given, else derived from the run's seed (which differs per
    rank) and ``name``. State loaded before the generator exists (a fresh method restored
    from a checkpoint) is kept and applied when it is created.

    Typical use in an `Algorithm`::

        self.rng = MethodRNG("mixup", seed)       # __init__
        self.rng.setup(state)                     # on Event.INIT
        torch.rand(..., generator=self.rng.generator)
        return {"rng": self.rng.state_dict()}     # state_dict()
    """

    def __init__(self, name: str, seed: int | None = None):
        self.name = name
        self.seed = seed
        self._generator: torch.Generator | None = None
        self._pending: torch.Tensor | None = None

    def setup(self, state: object, device: torch.device | str | None = None) -> torch.Generator:
        """Create the generator on `device` (default: the run's device), seeded from the run."""
        device = device if device is not None else getattr(state, "device", torch.device("cpu"))
        seed = self.seed if self.seed is not None else derive_seed(getattr(state, "seed", 0), self.name)
        self._generator = new_generator(device, seed)
        if self._pending is not None:
            set_generator_state(self._generator, self._pending)
            self._pending = None
        return self._generator

    @property
    def generator(self) -> torch.Generator:
        if self._generator is None:  # used outside a Trainer/Engine run: a CPU generator
            self._generator = new_generator("cpu", self.seed if self.seed is not None else derive_seed(0, self.name))
            if self._pending is not None:
                set_generator_state(self._generator, self._pending)
                self._pending = None
        return self._generator

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self._generator is not None:
            return {"state": generator_state(self._generator)}
        return {"state": self._pending} if self._pending is not None else {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            return
        if self._generator is not None:
            set_generator_state(self._generator, state["state"])
        else:
            self._pending = state["state"]


# Seedable distributions -------------------------------------------------------------------
# torch.distributions cannot take a torch.Generator, so these sample on the generator's
# device with a fixed number of vectorised rejection rounds: no Python loop over samples,
# no host synchronisation.

_GAMMA_ROUNDS = 16  # Marsaglia-Tsang accepts >= 95% per round for shape >= 1; 16 rounds fail with p < 1e-20


def sample_log_gamma(concentration: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """log of Gamma(concentration, 1) samples, one per element (Marsaglia and Tsang, 2000).

    Shapes below 1 use ``log Gamma(a) = log Gamma(a + 1) + log(U) / a``. Working in log space
    keeps tiny shapes exact: for a = 0.001 the sample itself underflows float32 most of the time.
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


def sample_gamma(concentration: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Gamma(concentration, 1) samples, one per element (may underflow to 0 for shapes << 1)."""
    return sample_log_gamma(concentration, generator).exp()


def sample_beta(alpha: torch.Tensor, beta: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Beta(alpha, beta) samples, elementwise: ``sigmoid(log Ga - log Gb)``, exact for tiny shapes."""
    alpha, beta = torch.broadcast_tensors(alpha, beta)
    logs = sample_log_gamma(torch.stack([alpha, beta]), generator)
    return torch.sigmoid(logs[0] - logs[1])


def sample_dirichlet(concentration: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Dirichlet samples over the last dimension of `concentration`: a softmax of log-gammas."""
    return torch.softmax(sample_log_gamma(concentration, generator), dim=-1)
