"""A run of several stateful methods together, stopped and resumed from its checkpoint, ends bitwise where the
uninterrupted run ends: weights, optimizer, every method's state (EMA's average and update count, SWA's average,
the generators), the scheduler, and every loss logged after the resume. Each method's own resume test runs it
alone; here MixUp, CutMix, label smoothing, progressive resizing and layer freezing run together under a cosine
schedule with warm-up, with EMA or with SWA, resumed mid-epoch, at an epoch's end, at the step progressive
resizing changes the image size, just after layers froze, and inside SWA's window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from cadence import Callback, Trainer
from cadence.loggers import InMemoryLogger
from cadence.registry import registry
from cadence.schedulers import CosineAnnealingWithWarmupScheduler
from cadence.testing import assert_same_tensors, image_dataset, tiny_image_classifier

METHODS = ("mixup", "cutmix", "label_smoothing", "progressive_resizing", "layer_freezing", "ema", "swa")
BATCHES_PER_EPOCH = 10  # 40 samples in batches of 4, 3 epochs


def _methods(averaging: str) -> list[Any]:
    method = registry().method
    common = [
        method("mixup").algorithm(alpha=0.4),
        method("cutmix").algorithm(alpha=1.0),
        method("label_smoothing").algorithm(smoothing=0.1),
        method("progressive_resizing").algorithm(
            initial_scale=0.5, delay_fraction=0.2, finetune_fraction=0.2, size_increment=4
        ),
        method("layer_freezing").algorithm(freeze_start=0.3, freeze_level=0.5),
    ]
    if averaging == "ema":
        return [*common, method("ema").algorithm(half_life="3ba")]
    swa = {"swa_start": "0.3dur", "swa_end": "0.8dur", "update_interval": "1ba", "schedule_swa_lr": True}
    return [*common, method("swa").algorithm(**swa, swa_lr=0.01)]


class ImageSizes(Callback):
    """The image side each batch trained at (after progressive resizing)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def before_forward(self, state: Any, logger: Any) -> None:
        self.sizes.append(int(state.batch[0].shape[-1]))


def _trainer(averaging: str, logger: InMemoryLogger, callbacks: list[Any], **options: Any) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier(4)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(40, 4), batch_size=4, shuffle=True),
        max_duration="3ep",
        optimizers=torch.optim.Adam(model.parameters(), lr=1e-2),
        schedulers=CosineAnnealingWithWarmupScheduler(t_warmup="3ba"),
        algorithms=_methods(averaging),
        loggers=[logger],
        callbacks=callbacks,
        seed=11,
        device="cpu",
        deterministic_mode=True,
        progress_bar=False,
        **options,
    )


@pytest.mark.parametrize("averaging", ["ema", "swa"])
def test_methods_together_resume_bitwise_where_their_states_change(averaging: str, tmp_path: Path) -> None:
    if missing := [name for name in METHODS if name not in registry().methods]:
        pytest.skip(f"not installed: {missing}")
    logged, recorder = InMemoryLogger(), ImageSizes()
    whole = _trainer(averaging, logged, [recorder], save_folder=tmp_path, save_interval="1ba")
    whole.fit()
    steps, losses = logged.steps_and_values("loss/train/total")
    sizes = recorder.sizes
    resized = next(k for k in range(1, len(sizes)) if sizes[k] != sizes[k - 1])  # batch k+1 trains at a new size
    # mid-epoch, an epoch's end, where the size changes, just after layers froze (at epoch ends), inside SWA's window
    for k in sorted({5, BATCHES_PER_EPOCH, resized, BATCHES_PER_EPOCH + 1, 21}):
        (checkpoint,) = tmp_path.glob(f"*-ba{k}.pt")
        resumed_log = InMemoryLogger()
        resumed = _trainer(averaging, resumed_log, [], load_path=checkpoint)
        resumed.fit()
        where = f"{averaging}, resumed after batch {k}"
        assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), f"{where}: model")
        assert_same_tensors(
            whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), f"{where}: optimizer"
        )
        for a, b in zip(whole.state.algorithms, resumed.state.algorithms, strict=True):
            assert_same_tensors(a.state_dict(), b.state_dict(), f"{where}: {type(a).__name__}")
        assert_same_tensors(
            whole.state.schedulers[0].state_dict(), resumed.state.schedulers[0].state_dict(), f"{where}: scheduler"
        )
        after = [float(loss) for step, loss in zip(steps, losses) if step > k]
        assert [float(loss) for loss in resumed_log.steps_and_values("loss/train/total")[1]] == after, where
    assert len(set(sizes)) >= 3 and 1 <= resized < len(sizes)  # the schedule did resize, in steps
