"""`SelectiveBackprop`: the Event adapter over `should_selective_backprop` and `select_indices_using_loss`."""

from __future__ import annotations

from typing import Any

import torch

from cadence import Effects, Event, NotApplicableError, Resource, State
from cadence.ops import (
    BatchKey,
    RandomMethod,
    autocast_context,
    batch_get_item,
    batch_set_item,
    check_batch_key,
    eval_mode,
    read_batch_item,
    take_samples,
)
from cadence_selective_backprop.functional import (
    check_per_sample_loss,
    check_per_sample_losses,
    check_selective_backprop_args,
    select_indices_using_loss,
    should_selective_backprop,
)

__all__ = ["SelectiveBackprop"]


class SelectiveBackprop(RandomMethod):
    """Keeps the higher-loss part of each batch on AFTER_DATALOADER, inside its window (see
    `should_selective_backprop` and `select_indices_using_loss` for the arguments).

    On INIT it sets up its generator and checks that ``state.model.loss`` accepts
    ``reduction='none'``. Its high ``order`` runs it first on AFTER_DATALOADER, so it scores the
    clean batch before augmentations. Scoring runs in eval mode (BatchNorm statistics and dropout
    untouched; each module's train/eval flag restored) under the run's autocast. Every tensor of a
    tuple or dict batch whose first dimension is the batch size is pruned with the inputs.
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 100  # outermost on AFTER_DATALOADER: scores the clean batch, before any augmentation
    generators = {"selective_backprop": "device"}

    def __init__(
        self,
        start: float = 0.5,
        end: float = 0.9,
        keep: float = 0.5,
        scale_factor: float = 1.0,
        interrupt: int = 2,
        input_key: BatchKey = 0,
        target_key: BatchKey = 1,
        *,
        seed: int | None = None,
    ):
        check_selective_backprop_args(start, end, keep, scale_factor, interrupt)
        super().__init__(seed=seed)
        self.start, self.end, self.keep, self.scale_factor, self.interrupt = start, end, keep, scale_factor, interrupt
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)

    def match(self, event: Event, state: State) -> bool:
        if event is not Event.AFTER_DATALOADER:
            return event is Event.INIT
        elapsed = state.get_elapsed_duration()
        if elapsed is None:
            raise ValueError("SelectiveBackprop runs in a window of the run: set the Trainer's max_duration")
        batch_idx = state.timestamp.batch_in_epoch
        return self.keep < 1 and should_selective_backprop(
            elapsed.value, batch_idx, self.start, self.end, self.interrupt
        )

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            check_per_sample_loss(state.model)
            return self.setup_generators(state)
        batch, model = state.batch, state.model
        inputs = batch_get_item(batch, self.input_key)

        def forward(x: torch.Tensor) -> Any:
            return model(batch_set_item(batch, self.input_key, x))

        def loss(outputs: Any, y: torch.Tensor, reduction: str = "none") -> torch.Tensor:
            return model.loss(outputs, batch_set_item(batch, self.target_key, y), reduction=reduction)

        target = batch_get_item(batch, self.target_key)
        with eval_mode(model), autocast_context(state.precision, state.device):
            kept = select_indices_using_loss(
                inputs,
                target,
                forward,
                loss,
                self.keep,
                self.scale_factor,
                generator=self.generator("selective_backprop"),
            )
        if kept.numel() < inputs.shape[0]:
            state.batch = take_samples(batch, kept, inputs.shape[0], (self.input_key, self.target_key))

    def effects(self) -> Effects:
        touched = {Resource.INPUTS, Resource.TARGETS}  # its window: fractions of the run (the run's length)
        return Effects(reads=touched | {Resource.WEIGHTS, Resource.DURATION}, writes=touched)

    def check_applicable(self, model: Any, batch: Any) -> None:
        check_per_sample_loss(model)
        inputs = read_batch_item(self, batch, self.input_key, "inputs", "input_key")
        read_batch_item(self, batch, self.target_key, "targets", "target_key")
        if self.keep < 1:  # a loss that takes `reduction` yet returns a mean would fail only once the window opens
            with torch.no_grad(), eval_mode(model):
                losses = model.loss(model(batch), batch, reduction="none")
            try:
                check_per_sample_losses(losses, inputs.shape[0], f"{type(model).__name__}.loss")
            except ValueError as error:
                raise NotApplicableError(
                    f"SelectiveBackprop ranks the samples of a batch by their losses, but {error}. Fix: make the "
                    "loss honour reduction='none' (one loss per sample), or leave SelectiveBackprop out"
                ) from None
