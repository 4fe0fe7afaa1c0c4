"""Optimizers and learning-rate schedulers, where Composer users look for them (``composer.optim``).

`DecoupledSGDW` and `DecoupledAdamW` decay the weights by a fraction that follows the schedule
(``lr / initial_lr``) instead of the learning rate; `DecoupledSGDW(params, lr=0.1)` is what the
`Trainer` builds when no optimizer is given, as Composer does. The schedulers are
`cadence.schedulers`' (Composer's names and arguments).
"""

from cadence.ops.weight_decay import DecoupledAdamW, DecoupledSGDW
from cadence.schedulers import (
    ConstantScheduler,
    CosineAnnealingScheduler,
    CosineAnnealingWithWarmupScheduler,
    LinearScheduler,
    LinearWithWarmupScheduler,
    MultiStepScheduler,
    MultiStepWithWarmupScheduler,
    Scheduler,
    StepScheduler,
    compile_scheduler,
)

ComposerScheduler = Scheduler  # Composer's name for the scheduler protocol

__all__ = [
    "ComposerScheduler",
    "ConstantScheduler",
    "CosineAnnealingScheduler",
    "CosineAnnealingWithWarmupScheduler",
    "DecoupledAdamW",
    "DecoupledSGDW",
    "LinearScheduler",
    "LinearWithWarmupScheduler",
    "MultiStepScheduler",
    "MultiStepWithWarmupScheduler",
    "Scheduler",
    "StepScheduler",
    "compile_scheduler",
]
