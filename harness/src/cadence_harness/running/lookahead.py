"""`Lookahead`: slow weights that trail the trained ones, as airbench trains (Zhang et al. 2019, "Lookahead
Optimizer: k steps forward, 1 step back", with the decay schedule of Jordan 2024).

Every `every` optimizer steps the slow copy moves toward the model, ``slow += (1 - d) * (fast - slow)``, and
the model restarts from it. The decay ``d = decay * t**power`` (t: the elapsed fraction of the run) is 0 at
the start, so early training is untouched, and grows to `decay` at the end; at FIT_END the model takes the
slow weights. Every floating-point tensor of the model's state (weights and batch-norm statistics) is
averaged. A recipe enables it with ``optimizer.lookahead = {every = 5, decay = 0.7738, power = 3}``; it is
part of the baseline's optimizer, not a speed-up method, and its slow weights go into checkpoints.
"""

from __future__ import annotations

from typing import Any

import torch

from cadence import Algorithm, Effects, Event, Resource, State

__all__ = ["Lookahead", "check_lookahead"]

DEFAULTS = {"every": 5, "decay": 0.95**5, "power": 3.0}


def check_lookahead(settings: Any) -> dict[str, Any]:
    """The recipe's ``optimizer.lookahead`` table with its defaults; each bad value named."""
    if not isinstance(settings, dict):
        raise ValueError(f"`optimizer.lookahead` = {settings!r}: give a table, e.g. {{every = 5, decay = 0.7738}}")
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"`optimizer.lookahead.{unknown[0]}`: unknown key; known: {', '.join(DEFAULTS)}")
    merged = {**DEFAULTS, **settings}
    every, decay, power = merged["every"], merged["decay"], merged["power"]
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"`optimizer.lookahead.every` = {every!r} must be an int >= 1 (optimizer steps)")
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay < 1.0:
        raise ValueError(f"`optimizer.lookahead.decay` = {decay!r} must be in [0, 1)")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or power < 0:
        raise ValueError(f"`optimizer.lookahead.power` = {power!r} must be a number >= 0")
    return merged


class Lookahead(Algorithm):
    """See the module docstring. Runs after the other methods on BATCH_END (before EMA and SWA average)."""

    events = (Event.AFTER_LOAD, Event.BATCH_END, Event.FIT_END)
    order = 150

    def __init__(self, every: int = 5, decay: float = 0.95**5, power: float = 3.0):
        settings = check_lookahead({"every": every, "decay": decay, "power": power})
        self.every, self.decay, self.power = settings["every"], settings["decay"], settings["power"]
        self.slow: dict[str, torch.Tensor] = {}

    def match(self, event: Event, state: State) -> bool:
        if event is Event.BATCH_END:
            return state.timestamp.batch % self.every == 0
        return event is Event.FIT_END or (event is Event.AFTER_LOAD and bool(self.slow))

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.AFTER_LOAD:  # checkpoints load on the CPU
            self.slow = {name: tensor.to(state.device) for name, tensor in self.slow.items()}
            return
        with torch.no_grad():
            self._step(event, state)

    def _step(self, event: Event, state: State) -> None:
        fast = _floating_state(state.model)
        if not self.slow:
            self.slow = {name: tensor.detach().clone() for name, tensor in fast.items()}
        if event is Event.FIT_END:
            decay = 1.0  # the model ends on the slow weights
        else:
            elapsed = state.get_elapsed_duration()
            decay = self.decay * (elapsed.value if elapsed is not None else 1.0) ** self.power
        names = list(self.slow)
        slow, model = [self.slow[n] for n in names], [fast[n] for n in names]
        torch._foreach_lerp_(slow, model, 1.0 - decay)
        torch._foreach_copy_(model, slow)

    def state_dict(self) -> dict[str, Any]:
        return {"slow": self.slow}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.slow = dict(state["slow"])

    def effects(self) -> Effects:
        return Effects(reads={Resource.WEIGHTS}, writes={Resource.WEIGHTS})

    def __repr__(self) -> str:
        return f"Lookahead(every={self.every}, decay={self.decay:.4g}, power={self.power})"


def _floating_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in model.state_dict(keep_vars=True).items() if tensor.is_floating_point()}
