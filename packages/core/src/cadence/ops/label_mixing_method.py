"""`LabelMixingMethod`: the adapter shared by methods that mix each example with a partner (MixUp, CutMix).

INIT creates its generators (see `RandomMethod`). Per microbatch: BEFORE_FORWARD mixes the
inputs (the method's `mix` draws the partners and the mix); BEFORE_LOSS replaces the targets by
dense targets mixed the same way, and AFTER_LOSS puts the original target object back, so
metrics, callbacks and outer methods see the data as loaded. With ``interpolate_loss=True`` the
targets are left alone and AFTER_LOSS interpolates the loss instead,
``(1 - w) * loss + w * model.loss(outputs, targets of the partners)``. Every microbatch draws its
own mix and mixes within itself.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from cadence.algorithm import Effects, Resource
from cadence.batch import BatchKey, batch_set_item, check_batch_key
from cadence.event import Event
from cadence.ops.applicability import require_tensor
from cadence.ops.checks import check_bool
from cadence.ops.method import RandomMethod
from cadence.ops.mixing import interpolate_loss, mix_with_permutation
from cadence.ops.targets import ensure_targets_one_hot, logits_of
from cadence.precision import autocast_context
from cadence.state import State

__all__ = ["LabelMixingMethod"]


class LabelMixingMethod(RandomMethod):
    """Subclasses implement `mix` (and may refine `mix_targets` and `check_applicable`).

    Attributes (Composer's names): ``indices``, each example's partner in the current microbatch;
    ``permuted_target``, the partners' targets; ``partner_weight``, the partner's share of the mix.
    Before the first step ``indices`` and ``permuted_target`` are empty tensors, as in Composer.
    They describe the last microbatch only, so checkpoints leave them out (the generators'
    states in ``state_dict`` are what an exact resume needs: the next step draws anew).
    """

    events = (Event.INIT, Event.BEFORE_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS)

    def __init__(self, interpolate_loss: bool, input_key: BatchKey, target_key: BatchKey, *, seed: int | None):
        super().__init__(seed=seed)
        self.interpolate_loss = check_bool("interpolate_loss", interpolate_loss)
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)
        self.indices: torch.Tensor = torch.empty(0, dtype=torch.long)
        self.permuted_target: Any = torch.empty(0)
        self.partner_weight = 0.0
        self._original_target: Any = None

    @abstractmethod
    def mix(self, input: torch.Tensor, target: Any, state: State) -> torch.Tensor:
        """Draw this microbatch's mix, set ``indices``, ``permuted_target`` and ``partner_weight``,
        and return the mixed input."""

    def mix_targets(self, target: torch.Tensor, state: State) -> torch.Tensor:
        """The targets the loss sees: dense, mixed like the inputs (the logits give the classes)."""
        dense = ensure_targets_one_hot(logits_of(state.outputs), target)
        return mix_with_permutation(dense, self.indices, self.partner_weight)  # type: ignore[arg-type]

    def match(self, event: Event, state: State) -> bool:
        return event in self.events and not (event is Event.BEFORE_LOSS and self.interpolate_loss)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self.setup_generators(state)
        elif event is Event.BEFORE_FORWARD:
            mixed = self.mix(state.batch_get_item(self.input_key), state.batch_get_item(self.target_key), state)
            state.batch_set_item(self.input_key, mixed)
        elif event is Event.BEFORE_LOSS:
            self._original_target = state.batch_get_item(self.target_key)
            state.batch_set_item(self.target_key, self.mix_targets(self._original_target, state))
        elif self.interpolate_loss:  # AFTER_LOSS: partner targets from those the loss just saw (maybe smoothed)
            target = state.batch_get_item(self.target_key)
            permuted = batch_set_item(state.batch, self.target_key, target[self.indices])
            with autocast_context(state.precision, state.device):
                other = state.model.loss(state.outputs, permuted)
            state.loss = interpolate_loss(state.loss, other, self.partner_weight)
        else:  # AFTER_LOSS: restore what BEFORE_LOSS replaced
            state.batch_set_item(self.target_key, self._original_target)
            self._original_target = None

    def effects(self) -> Effects:
        if not self.interpolate_loss:
            return Effects(reads={Resource.INPUTS, Resource.TARGETS}, writes={Resource.INPUTS, Resource.TARGETS})
        return Effects(
            reads={Resource.INPUTS, Resource.TARGETS, Resource.LOSS},
            writes={Resource.INPUTS},
            exclusive={Resource.LOSS: "interpolates the loss (interpolate_loss=True)"},
        )

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.input_key, "inputs", key_name="input_key", floating=True)
        require_tensor(self, batch, self.target_key, "targets", key_name="target_key")
