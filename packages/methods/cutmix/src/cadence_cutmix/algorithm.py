"""`CutMix`: the Event adapter around `cutmix_batch`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from cadence.algorithm import Algorithm, Effects, Resource
from cadence.batch import BatchKey, batch_set_item, check_batch_key
from cadence.event import Event
from cadence.models.classifier import ensure_targets_one_hot
from cadence.precision import autocast_context
from cadence.rng import MethodRNG
from cadence.state import State
from cadence_cutmix.functional import (
    _check_alpha,
    _draw_indices,
    _interpolate_loss,
    _is_segmentation,
    _mix,
    _paste,
    _random_bbox,
    cutmix_batch,
)

__all__ = ["CutMix"]


class CutMix(Algorithm):
    """Pastes a box from another example of the batch and mixes the labels by area (see `cutmix_batch`).

    Events: INIT creates its generators; BEFORE_FORWARD pastes the box into the inputs; BEFORE_LOSS
    replaces the targets by ``area * y + (1 - area) * y[perm]`` (dense; segmentation targets take the box)
    and AFTER_LOSS puts the original targets back. With ``interpolate_loss=True`` the targets are left
    alone and AFTER_LOSS interpolates the loss instead, ``area * loss + (1 - area) * model.loss(outputs,
    targets permuted)``. These events fire per microbatch: every microbatch draws its own box and mixes
    within itself.
    """

    events = (Event.INIT, Event.BEFORE_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS)
    order = 30  # the innermost of LabelSmoothing (10), MixUp (20), CutMix: see the card's Composition section

    def __init__(
        self,
        alpha: float = 1.0,
        interpolate_loss: bool = False,
        uniform_sampling: bool = False,
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
    ):
        _check_alpha(alpha)
        for name, flag in (("interpolate_loss", interpolate_loss), ("uniform_sampling", uniform_sampling)):
            if not isinstance(flag, bool):
                raise TypeError(f"`{name}` must be True or False, got {flag!r}")
        self.alpha, self.interpolate_loss, self.uniform_sampling = float(alpha), interpolate_loss, uniform_sampling
        self.input_key, self.target_key = (
            check_batch_key("input_key", input_key),
            check_batch_key("target_key", target_key),
        )
        self._permutation_rng = MethodRNG("cutmix/permutation")  # on the training device
        self._box_rng = MethodRNG("cutmix/box")  # on the CPU: the box is Python ints
        self._indices: torch.Tensor | None = None
        self._bbox = (0, 0, 0, 0)
        self._area = 1.0
        self._original_target: Any = None

    def effects(self) -> Effects:
        if not self.interpolate_loss:
            return Effects(reads={Resource.INPUTS, Resource.TARGETS}, writes={Resource.INPUTS, Resource.TARGETS})
        return Effects(
            reads={Resource.INPUTS, Resource.TARGETS, Resource.LOSS},
            writes={Resource.INPUTS},
            exclusive={Resource.LOSS: "interpolates the loss (interpolate_loss=True)"},
        )

    def match(self, event: Event, state: State) -> bool:
        return event in self.events and not (event is Event.BEFORE_LOSS and self.interpolate_loss)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self._permutation_rng.setup(state)
            self._box_rng.setup(SimpleNamespace(device=torch.device("cpu"), seed=state.seed))
        elif event is Event.BEFORE_FORWARD:
            input, target = state.batch_get_item(self.input_key), state.batch_get_item(self.target_key)
            if self.interpolate_loss and _is_segmentation(target, input):
                raise ValueError(
                    "CutMix(interpolate_loss=True) cannot interpolate the loss of segmentation "
                    "targets (the box is pasted into them); use interpolate_loss=False"
                )
            bbox = _random_bbox(*input.shape[-2:], None, self.alpha, self.uniform_sampling, self._box_rng.generator)
            self._indices = _draw_indices(input.shape[0], input.device, self._permutation_rng.generator)
            mixed, _, self._area, self._bbox = cutmix_batch(input, target, bbox=bbox, indices=self._indices)
            state.batch_set_item(self.input_key, mixed)
        elif event is Event.BEFORE_LOSS:
            target = self._original_target = state.batch_get_item(self.target_key)
            if _is_segmentation(target, state.batch_get_item(self.input_key)):
                state.batch_set_item(self.target_key, _paste(target, self._indices, self._bbox))
            else:
                state.batch_set_item(
                    self.target_key, _mix(ensure_targets_one_hot(state.outputs, target), self._indices, self._area)
                )
        elif self.interpolate_loss:  # AFTER_LOSS: the targets are those the loss just saw
            target = state.batch_get_item(self.target_key)
            permuted = batch_set_item(state.batch, self.target_key, target[self._indices])
            with autocast_context(state.precision, state.device):
                other = state.model.loss(state.outputs, permuted)
            state.loss = _interpolate_loss(state.loss, other, self._area)
        else:  # AFTER_LOSS: restore what BEFORE_LOSS replaced
            state.batch_set_item(self.target_key, self._original_target)
            self._original_target = None

    def state_dict(self) -> dict[str, Any]:
        return {"permutation_rng": self._permutation_rng.state_dict(), "box_rng": self._box_rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._permutation_rng.load_state_dict(state.get("permutation_rng", {}))
        self._box_rng.load_state_dict(state.get("box_rng", {}))
