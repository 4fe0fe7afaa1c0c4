"""On a GPU, a training step with every data-side method never synchronises with the host (issue 13).

The batches live on the device from the start (as the harness's GPU loader keeps them), and from the
second batch on every step runs under ``torch.cuda.set_sync_debug_mode("error")``: from
BEFORE_DATALOADER (the data-side methods act on AFTER_DATALOADER) to BATCH_END, so any ``.item()``,
``.cpu()`` or synchronising copy in a method or in the trainer's step raises. The first batch is left
out: the trainer checks the methods against it once, before anything trains.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cadence import Callback, Classifier, Event, Trainer
from cadence.registry import registry
from cadence.testing import TinyCNN

# Data-side methods, with arguments that make each act on every batch of 32x32 images.
DATA_SIDE: dict[str, dict[str, Any]] = {
    "mixup": {},
    "cutmix": {},
    "cutout": {},
    "colout": {},
    "label_smoothing": {},
    "randaugment": {},
    "augmix": {},
    "progressive_resizing": {"delay_fraction": 0.0},
    "selective_backprop": {"start": 0.0, "end": 1.0, "interrupt": 0},
}


class NoSyncInTheStep(Callback):
    def __init__(self) -> None:
        self.batches_checked = 0

    def run_event(self, event: Event, state: Any, logger: Any) -> None:
        if event is Event.BEFORE_DATALOADER and int(state.timestamp.batch) >= 1:
            torch.cuda.set_sync_debug_mode("error")
        elif event is Event.BATCH_END and torch.cuda.get_sync_debug_mode() != 0:
            torch.cuda.set_sync_debug_mode("default")
            self.batches_checked += 1


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(DATA_SIDE))
def test_a_step_with_a_data_side_method_does_not_synchronise(name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    info = registry().methods.get(name)
    if info is None:
        pytest.skip(f"{name} is not installed")
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 16, 3, 32, 32), dtype=torch.uint8, generator=generator)
    batches = [
        (batch.float().div(255).cuda(), torch.randint(0, 4, (16,), generator=generator).cuda()) for batch in images
    ]
    watcher = NoSyncInTheStep()
    model = Classifier(TinyCNN(num_classes=4), num_classes=4)
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        max_duration="6ba",
        algorithms=[info.algorithm(**DATA_SIDE[name])],
        callbacks=[watcher],
        device="gpu",
        precision="amp_bf16",
        seed=0,
        progress_bar=False,
    )
    try:
        trainer.fit()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watcher.batches_checked == 5
