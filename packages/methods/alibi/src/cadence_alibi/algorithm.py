"""`Alibi`: the Event adapter over `apply_alibi` and `scale_sequence_length`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence import Effects, Event, NotApplicableError, Resource, State
from cadence.ops import SurgeryMethod, SurgeryReport
from cadence_alibi.functional import apply_alibi, check_alibi_args, check_alibi_model, scale_sequence_length

__all__ = ["Alibi"]


class Alibi(SurgeryMethod):
    """Replaces position embeddings by ALiBi on INIT (`apply_alibi`) and trains on sequences shortened by
    `train_sequence_length_scaling` on AFTER_DATALOADER (`scale_sequence_length`). Deterministic: it
    draws no random numbers. Evaluation batches keep their full length.
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    # On AFTER_DATALOADER (highest order first) the reshape sits inside Selective Backprop (100), which
    # picks whole sequences, and outside methods that shorten sequences further (sequence-length warmup).
    # On INIT its surgery touches attention and position embeddings only: any place among surgeries works.
    order = 40
    runtime_arguments = frozenset({"strict", "train_sequence_length_scaling"})  # a resumed run may reshape otherwise

    def __init__(self, max_sequence_length: int, train_sequence_length_scaling: float = 0.25, *, strict: bool = False):
        check_alibi_args(max_sequence_length, train_sequence_length_scaling)
        super().__init__(strict=strict)
        self.max_sequence_length = max_sequence_length
        self.train_sequence_length_scaling = train_sequence_length_scaling

    def surgery(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> SurgeryReport:
        return apply_alibi(model, self.max_sequence_length, optimizers, strict=self.strict)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            return super().apply(event, state, logger)
        if self.train_sequence_length_scaling != 1:
            state.batch = scale_sequence_length(state.batch, self.train_sequence_length_scaling)

    def effects(self) -> Effects:
        batch = {Resource.INPUTS, Resource.TARGETS}  # every (B, S) entry, labels included, is reshaped
        return Effects(reads=batch, writes={Resource.MODEL, Resource.OPTIMIZER, *batch})

    def check_applicable(self, model: Any, batch: Any) -> None:
        try:
            check_alibi_model(model)
            if self.train_sequence_length_scaling != 1:
                scale_sequence_length(batch, self.train_sequence_length_scaling)
        except (TypeError, ValueError) as error:
            raise NotApplicableError(f"{self.name} does not apply: {error}") from None
