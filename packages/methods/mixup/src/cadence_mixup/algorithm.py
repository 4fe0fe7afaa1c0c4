"""`MixUp`: the Event adapter around `mixup_batch`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from cadence.algorithm import Algorithm, Effects, Resource
from cadence.batch import BatchKey, batch_set_item, check_batch_key
from cadence.event import Event
from cadence.mixing import interpolate_loss, mix_with_permutation, random_permutation
from cadence.models.classifier import ensure_targets_one_hot
from cadence.precision import autocast_context
from cadence.rng import MethodRNG
from cadence.state import State
from cadence_mixup.functional import (
    _check_alpha,
    _draw_mixing,
    mixup_batch,
)

__all__ = ["MixUp"]


class MixUp(Algorithm):
    """Trains on convex combinations of pairs of examples and of their labels (see `mixup_batch`).

    Events: INIT creates its generators; BEFORE_FORWARD mixes the inputs; BEFORE_LOSS replaces the
    targets by dense mixed targets and AFTER_LOSS puts the original targets back. With
    ``interpolate_loss=True`` the targets are left alone and AFTER_LOSS interpolates the loss instead,
    ``(1 - mixing) * loss + mixing * model.loss(outputs, targets permuted)``. These events fire per
    microbatch, so every microbatch draws its own coefficient and mixes within itself.
    """

    events = (Event.INIT, Event.BEFORE_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS)
    order = 20  # inside LabelSmoothing (10), outside CutMix (30): see the card's Composition section

    def __init__(
        self, alpha: float = 0.2, interpolate_loss: bool = False, input_key: BatchKey = 0, target_key: BatchKey = 1
    ):
        _check_alpha(alpha)
        if not isinstance(interpolate_loss, bool):
            raise TypeError(f"`interpolate_loss` must be True or False, got {interpolate_loss!r}")
        self.alpha, self.interpolate_loss = float(alpha), interpolate_loss
        self.input_key, self.target_key = (
            check_batch_key("input_key", input_key),
            check_batch_key("target_key", target_key),
        )
        self._permutation_rng = MethodRNG("mixup/permutation")  # on the training device
        self._mixing_rng = MethodRNG("mixup/mixing")  # on the CPU: the coefficient is a Python float
        self._indices: torch.Tensor | None = None
        self._mixing = 0.0
        self._original_target: Any = None

    def effects(self) -> Effects:
        if not self.interpolate_loss:
            return Effects(reads={Resource.INPUTS, Resource.TARGETS}, writes={Resource.INPUTS, Resource.TARGETS})
        fix = (
            "MixUp(interpolate_loss=True) must be the innermost method that changes the targets, but CutMix "
            f"(order 30) mixes them inside MixUp (order {self.order}), so the interpolated loss would use the "
            "wrong labels. Use MixUp(interpolate_loss=False): dense mixed targets give the same cross-entropy, "
            "and CutMix may keep interpolate_loss=True"
        )
        return Effects(
            reads={Resource.INPUTS, Resource.TARGETS, Resource.LOSS},
            writes={Resource.INPUTS},
            exclusive={Resource.LOSS: "interpolates the loss (interpolate_loss=True)"},
            conflicts={"CutMix": fix},
        )

    def match(self, event: Event, state: State) -> bool:
        return event in self.events and not (event is Event.BEFORE_LOSS and self.interpolate_loss)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self._permutation_rng.setup(state)
            self._mixing_rng.setup(SimpleNamespace(device=torch.device("cpu"), seed=state.seed))
        elif event is Event.BEFORE_FORWARD:
            input = state.batch_get_item(self.input_key)
            self._mixing = _draw_mixing(self.alpha, self._mixing_rng.generator)
            self._indices = random_permutation(input.shape[0], input.device, self._permutation_rng.generator)
            mixed, _, _ = mixup_batch(input, state.batch_get_item(self.target_key), self._mixing, indices=self._indices)
            state.batch_set_item(self.input_key, mixed)
        elif event is Event.BEFORE_LOSS:
            self._original_target = state.batch_get_item(self.target_key)
            dense = ensure_targets_one_hot(state.outputs, self._original_target)
            state.batch_set_item(self.target_key, mix_with_permutation(dense, self._indices, self._mixing))
        elif self.interpolate_loss:  # AFTER_LOSS: the targets are those the loss just saw
            target = state.batch_get_item(self.target_key)
            permuted = batch_set_item(state.batch, self.target_key, target[self._indices])
            with autocast_context(state.precision, state.device):
                other = state.model.loss(state.outputs, permuted)
            state.loss = interpolate_loss(state.loss, other, self._mixing)
        else:  # AFTER_LOSS: restore what BEFORE_LOSS replaced
            state.batch_set_item(self.target_key, self._original_target)
            self._original_target = None

    def state_dict(self) -> dict[str, Any]:
        return {"permutation_rng": self._permutation_rng.state_dict(), "mixing_rng": self._mixing_rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._permutation_rng.load_state_dict(state.get("permutation_rng", {}))
        self._mixing_rng.load_state_dict(state.get("mixing_rng", {}))
