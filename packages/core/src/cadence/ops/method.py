"""`Method` and `RandomMethod`: the base classes of cadence's speed-up methods (the adapter side).

`Method` is an `Algorithm` that runs on every event it declares. `RandomMethod` adds, in one
place, what every method that draws random numbers needs: a ``seed`` argument; its own named
generators, never the global RNG, created at INIT on the training device (or on the CPU, for
numbers read on the host) and seeded from the method's seed or from the run's seed (which
differs per rank); and their states in ``state_dict``, so that a resumed run draws exactly the
numbers the uninterrupted run would have drawn.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from cadence.algorithm import Algorithm
from cadence.event import Event
from cadence.ops.checks import check_seed
from cadence.ops.rng import MethodRNG, derive_seed
from cadence.state import State

__all__ = ["Method", "RandomMethod"]


class Method(Algorithm):
    """An `Algorithm` that runs on every event it declares in ``events`` (override `match` to narrow it)."""

    def match(self, event: Event, state: State) -> bool:
        return event in self.events


class RandomMethod(Method):
    """A `Method` that draws random numbers from its own generators (see the module docstring).

    A subclass names its generators in `generators` and declares INIT in its ``events``::

        generators = {"cutout": "device"}   # name -> "device" (the training device) or "cpu"

        def __init__(self, ..., *, seed=None):
            super().__init__(seed=seed)
        def apply(self, event, state, logger):
            if event is Event.INIT:
                return self.setup_generators(state)
            ... cutout_batch(images, ..., generator=self.generator("cutout"))

    `state_dict` and `load_state_dict` carry the generators (extend them with ``super()``).
    """

    generators: ClassVar[dict[str, str]] = {}

    def __init__(self, *, seed: int | None = None):
        self.seed = check_seed("seed", seed)
        stream_seed = {name: None if seed is None else derive_seed(seed, name) for name in self.generators}
        self._rngs = {name: MethodRNG(name, stream_seed[name]) for name in self.generators}

    def setup_generators(self, state: State) -> None:
        """Create the generators (on INIT): seeded from ``seed``, else from the run's seed and their names."""
        for name, where in self.generators.items():
            self._rngs[name].setup(state, torch.device("cpu") if where == "cpu" else None)

    def generator_seeds(self) -> dict[str, int]:
        """``{generator name: the seed it was created with}``, once INIT created them (the Trainer logs them, so a
        run's randomness can be traced per method; on resume they are the same numbers)."""
        return {name: rng.seed_used for name, rng in self._rngs.items() if rng.seed_used is not None}

    def generator(self, name: str) -> torch.Generator:
        """The generator `name` (a CPU generator when used before INIT, outside a run)."""
        return self._rngs[name].generator

    def state_dict(self) -> dict[str, Any]:
        return {"rng": {name: rng.state_dict() for name, rng in self._rngs.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, saved in state.get("rng", {}).items():
            if name in self._rngs:
                self._rngs[name].load_state_dict(saved)
