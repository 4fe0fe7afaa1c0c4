"""`LayerFreezing`: the Event adapter over `freeze_layers` (hooks on INIT, freezing on EPOCH_END)."""

from __future__ import annotations

from typing import Any

import torch

from cadence import Effects, Event, Resource, State
from cadence.ops import Method
from cadence_layer_freezing.functional import check_layer_freezing_args, freeze_first_layers, freeze_layers

__all__ = ["LayerFreezing"]

RECORD = "layer_freezing"
"""The key under which an optimizer's state_dict records how many layers were frozen out of it."""


class LayerFreezing(Method):
    """Freezes the earliest layers on EPOCH_END, by the schedule of `freeze_layers` (arguments as there).

    Exact resume: frozen parameters left the optimizers, so a fresh optimizer has more than the
    checkpoint's. On INIT each optimizer gets two hooks: its ``state_dict`` records the freeze
    depth, and ``load_state_dict`` freezes those layers first, so the checkpoint loads and the
    run continues exactly as the uninterrupted one.
    """

    events = (Event.INIT, Event.EPOCH_END)
    order = 0  # acts alone, after an epoch's last step: nothing to nest with
    find_unused_parameters = True  # frozen parameters get no gradient, and DDP was built before they froze

    def __init__(self, freeze_start: float = 0.5, freeze_level: float = 1.0):
        check_layer_freezing_args(freeze_start, freeze_level)
        self.freeze_start, self.freeze_level = freeze_start, freeze_level
        self.freeze_depth = 0
        self._model: torch.nn.Module | None = None

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            self._model = state.model
            for optimizer in state.optimizers:
                optimizer.register_state_dict_post_hook(self._record)
                optimizer.register_load_state_dict_pre_hook(self._refreeze)
            return
        elapsed = state.get_elapsed_duration()
        if elapsed is None:
            raise ValueError("LayerFreezing follows a schedule over the run: set the Trainer's max_duration")
        schedule = (elapsed.value, self.freeze_start, self.freeze_level)
        self.freeze_depth, percentage = freeze_layers(state.model, state.optimizers, *schedule)
        logger.log_metrics(
            {"layer_freezing/layers_frozen": self.freeze_depth, "layer_freezing/percentage_frozen": percentage}
        )

    def _record(self, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
        saved[RECORD] = {"freeze_depth": self.freeze_depth}

    def _refreeze(self, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> dict[str, Any]:
        saved = dict(saved)
        depth = saved.pop(RECORD, {}).get("freeze_depth", 0)
        if self._model is not None and depth:
            freeze_first_layers(self._model, optimizer, depth)
            self.freeze_depth = max(self.freeze_depth, depth)
        return saved

    def state_dict(self) -> dict[str, Any]:
        return {"freeze_depth": self.freeze_depth}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.freeze_depth = int(state.get("freeze_depth", 0))

    def effects(self) -> Effects:
        # it freezes by the elapsed fraction of the run
        return Effects(reads={Resource.DURATION}, writes={Resource.OPTIMIZER, Resource.GRADIENTS})
