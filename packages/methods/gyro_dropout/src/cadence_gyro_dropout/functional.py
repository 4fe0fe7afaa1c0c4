"""Gyro Dropout (Lee et al., MLSys 2022) as model surgery: nn.Dropout layers become `GyroDropoutLayer`s. Torch only."""

from __future__ import annotations

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_int, check_number
from cadence.ops.surgery import SurgeryReport, replace_modules
from cadence_gyro_dropout.layers import GyroDropoutLayer, check_gyro_dropout_args

__all__ = ["apply_gyro_dropout", "check_gyro_dropout_args"]


def apply_gyro_dropout(
    model: nn.Module,
    iters_per_epoch: int,
    max_epoch: float,
    p: float,
    sigma: int,
    tau: int,
    *,
    generator: torch.Generator | None = None,
    strict: bool = False,
) -> SurgeryReport:
    """Replace every ``nn.Dropout`` of `model` that drops something (``p > 0``) by a `GyroDropoutLayer`, in place.

    Dropout samples a new sub-network for every sample and step, so each is trained about once;
    training a fixed pool of `sigma` sub-networks, `tau` per step, trains each of them enough to
    make the ensemble averaged at evaluation better (Lee et al., MLSys 2022).

    Args:
        model: the network (a ``torch.compile``-d model is unwrapped; DDP is refused).
        iters_per_epoch: training (optimizer) steps per epoch; with `max_epoch`, the run's length in
            steps, over which the pool is cycled once. The layers count a training forward as a
            step unless the loop begins each step with `GyroDropoutLayer.start_step` (as
            `GyroDropout` does under the Trainer): a loop with several forwards per step
            (gradient accumulation, SAM) must, or the picks change too often.
        max_epoch: the run's length in epochs (a fraction is fine: only the product counts).
        p: the drop probability of every replaced layer, in [0, 1) (the ``nn.Dropout``'s own `p`
            only decides whether it is replaced: Composer also replaces ``p=0`` placeholders).
        sigma: the number of pre-selected masks (sub-networks); Composer suggests 256 for
            LeNet/AlexNet-sized networks and 1024 for ResNet-18/BERT.
        tau: the number of masks used per step (16; 8 for ResNet-18/BERT).
        generator: draws the masks on the model's device (the global RNG when None).
        strict: raise `NoEffectError` instead of warning `NoEffectWarning` when there is no ``nn.Dropout``.

    Returns:
        The `SurgeryReport` (dropout layers own no parameters: optimizers are untouched).
    """
    check_gyro_dropout_args(p, sigma, tau)
    check_int("iters_per_epoch", iters_per_epoch, ge=1, hint="training steps per epoch")
    check_number("max_epoch", max_epoch, gt=0, hint="the run's length in epochs")
    check_bool("strict", strict)

    def policy(module: nn.Module, path: str) -> GyroDropoutLayer | None:
        if module.p == 0:  # a placeholder (timm puts nn.Dropout(0.0) everywhere): the model drops nothing there
            return None
        return GyroDropoutLayer(iters_per_epoch, max_epoch, p, sigma, tau, generator=generator)

    return replace_modules(model, {nn.Dropout: policy}, method="GyroDropout", strict=strict)
