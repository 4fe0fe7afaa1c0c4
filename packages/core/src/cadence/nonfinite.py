"""Stopping (or skipping) a training step whose loss is NaN or infinite, without a host sync per step.

A NaN in the inputs or an exploding loss otherwise trains on silently and leaves NaN weights.
`NonFiniteLossGuard` looks at each step's loss:

* ``"error"`` (the default): the run stops with `NonFiniteLossError`, naming the step and the
  value. On the CPU the loss is read at every step (free there). On an accelerator, reading it
  would wait for the device, so the losses are kept and read back together every
  ``check_every`` steps, and before every checkpoint and evaluation and at the end of fit: a run
  stops at most ``check_every`` steps late and never saves weights trained on a bad loss.
* ``"skip"``: a step with a non-finite loss does not update the weights (the batch still counts
  as trained); skips are counted, warned about once and logged. Deciding before the optimizer
  step means reading the loss at every step: a host sync per step on an accelerator.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

__all__ = ["NONFINITE_MODES", "NonFiniteLossError", "NonFiniteLossGuard"]

NONFINITE_MODES = ("error", "skip")


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""

    def __init__(self, step: int, value: float, where: str = ""):
        self.step, self.value = step, value
        super().__init__(
            f"the training loss is {value} at step {step}{where}. Look for NaN or infinite inputs or targets, "
            "or a learning rate too high for this model; Trainer(nonfinite_loss='skip') skips such steps instead"
        )


class NonFiniteLossGuard:
    """Watches each step's loss (see the module docstring).

    `read_every_step`: read the loss at every step (default: on the CPU only, where it is free);
    otherwise losses are read back together every `check_every` steps.
    """

    def __init__(self, mode: str = "error", check_every: int = 50, read_every_step: bool | None = None):
        self.mode = mode
        self.check_every = check_every
        self.read_every_step = read_every_step
        self.skipped = 0
        self._pending: list[tuple[int, torch.Tensor]] = []

    def observe(self, loss: torch.Tensor, step: int) -> bool:
        """Note the loss of `step` (1-based); False means: do not apply this step's update."""
        read_now = loss.device.type == "cpu" if self.read_every_step is None else self.read_every_step
        if self.mode == "skip" or read_now:
            value = float(loss)
            if math.isfinite(value):
                return True
            if self.mode == "error":
                raise NonFiniteLossError(step, value)
            self.skipped += 1
            if self.skipped == 1:
                warnings.warn(
                    f"the training loss is {value} at step {step}; the step is skipped (nonfinite_loss='skip'). "
                    "Skipped steps are counted in the metric trainer/nonfinite_skips",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return False
        self._pending.append((step, loss.detach() if loss.requires_grad else loss))  # the Trainer's is detached
        if len(self._pending) >= self.check_every:
            self.check()
        return True

    def check(self) -> None:
        """Read back the losses not checked yet (one host sync) and raise at the first bad one."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        values = torch.stack([loss.float().reshape(()) for _, loss in pending]).tolist()
        for (step, _), value in zip(pending, values):
            if not math.isfinite(value):
                raise NonFiniteLossError(step, value, " (found at a periodic check, not at once on this device)")

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))
