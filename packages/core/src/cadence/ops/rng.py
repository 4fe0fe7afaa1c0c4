"""Explicit, per-component random number generators.

Methods never draw from the global RNG: each owns `torch.Generator`s on the training device
(or the CPU), seeded from the method's ``seed`` or from the run's seed and a stream name, and
stores their states in its ``state_dict`` so that a resumed run draws the very same numbers.
`cadence.ops.RandomMethod` is the adapter side of this; `MethodRNG` is one generator.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["MethodRNG", "derive_seed", "generator_state", "new_generator", "set_generator_state"]


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

    Typical use in an `Algorithm` (`cadence.ops.RandomMethod` does this for you)::

        self.rng = MethodRNG("mixup", seed)       # __init__
        self.rng.setup(state)                     # on Event.INIT
        torch.rand(..., generator=self.rng.generator)
        return {"rng": self.rng.state_dict()}     # state_dict()
    """

    def __init__(self, name: str, seed: int | None = None):
        self.name = name
        self.seed = seed
        self.seed_used: int | None = None  # what `setup` seeded the generator with (logged with the run)
        self._generator: torch.Generator | None = None
        self._pending: torch.Tensor | None = None

    def setup(self, state: object, device: torch.device | str | None = None) -> torch.Generator:
        """Create the generator on `device` (default: the run's device), seeded from the run."""
        device = device if device is not None else getattr(state, "device", torch.device("cpu"))
        seed = self.seed if self.seed is not None else derive_seed(getattr(state, "seed", 0), self.name)
        self.seed_used = seed
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
