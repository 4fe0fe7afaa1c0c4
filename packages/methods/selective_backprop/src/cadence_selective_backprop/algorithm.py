"""`SelectiveBackprop`: the Event adapter over `should_selective_backprop` and `select_indices_using_loss`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from cadence import Algorithm, Effects, Event, Resource, State
from cadence.batch import BatchKey, batch_get_item, batch_set_item, check_batch_key
from cadence.precision import autocast_context
from cadence.rng import MethodRNG
from cadence_selective_backprop.functional import (
    check_selective_backprop_args,
    select_indices_using_loss,
    should_selective_backprop,
    takes_reduction,
)

__all__ = ["SelectiveBackprop"]


class SelectiveBackprop(Algorithm):
    """Keeps the higher-loss part of each batch on AFTER_DATALOADER, inside its window (see
    `should_selective_backprop` and `select_indices_using_loss` for the arguments).

    On INIT it sets up its generator and checks that ``state.model.loss`` accepts
    ``reduction='none'``. Its high ``order`` runs it first on AFTER_DATALOADER, so it scores the
    clean batch before augmentations. Scoring runs in eval mode (BatchNorm statistics and dropout
    untouched; each module's train/eval flag restored) under the run's autocast. Every tensor of a
    tuple or dict batch whose first dimension is the batch size is pruned with the inputs.
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 100

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
        self.start, self.end, self.keep, self.scale_factor, self.interrupt = start, end, keep, scale_factor, interrupt
        self.input_key = check_batch_key("input_key", input_key)
        self.target_key = check_batch_key("target_key", target_key)
        self.seed = seed
        self.rng = MethodRNG("selective_backprop", seed)

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
            _check_model_loss(state.model)
            self.rng.setup(state)
            return
        batch, model = state.batch, state.model
        inputs = batch_get_item(batch, self.input_key)

        def forward(x: torch.Tensor) -> Any:
            return model(batch_set_item(batch, self.input_key, x))

        def loss(outputs: Any, y: torch.Tensor, reduction: str = "none") -> torch.Tensor:
            return model.loss(outputs, batch_set_item(batch, self.target_key, y), reduction=reduction)

        target = batch_get_item(batch, self.target_key)
        with _eval_mode(model), autocast_context(state.precision, state.device):
            kept = select_indices_using_loss(
                inputs, target, forward, loss, self.keep, self.scale_factor, generator=self.rng.generator
            )
        if kept.numel() < inputs.shape[0]:
            state.batch = _prune(batch, kept, inputs.shape[0], (self.input_key, self.target_key))

    def effects(self) -> Effects:
        return Effects(
            reads={Resource.INPUTS, Resource.TARGETS, Resource.WEIGHTS}, writes={Resource.INPUTS, Resource.TARGETS}
        )

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.load_state_dict(state.get("rng", {}))


def _check_model_loss(model: nn.Module) -> None:
    """Fail before training when per-sample losses cannot be had (Composer finds out mid-run)."""
    loss = getattr(model, "loss", None)
    inner = getattr(model, "loss_fn", None)
    for name, function in ((f"{type(model).__name__}.loss", loss), (f"{type(model).__name__}.loss_fn", inner)):
        if function is not None and not (callable(function) and takes_reduction(function)):
            raise TypeError(
                f"SelectiveBackprop scores each sample with {name}(..., reduction='none'), but {name} takes no "
                "`reduction` argument. Fix: give the loss a `reduction` keyword (e.g. a loss_fn that forwards it "
                "to F.cross_entropy), or drop SelectiveBackprop"
            )
    if loss is None:
        raise TypeError(
            f"SelectiveBackprop needs a cadence Model with loss(outputs, batch), got {type(model).__name__}"
        )


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode for the scoring pass, then every module's own flag back (frozen BNs stay frozen)."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def _prune(batch: Any, kept: torch.Tensor, num_samples: int, keys: tuple[BatchKey, BatchKey]) -> Any:
    """Index every per-sample tensor of a tuple/dict batch; other batch types: the input and the target."""

    def pick(value: Any) -> Any:
        per_sample = isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == num_samples
        return value[kept] if per_sample else value

    if isinstance(batch, Mapping):
        return {key: pick(value) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return [pick(v) for v in batch] if isinstance(batch, list) else tuple(pick(v) for v in batch)
    for key in keys:
        batch = batch_set_item(batch, key, pick(batch_get_item(batch, key)))
    return batch
