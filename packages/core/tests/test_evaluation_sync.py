"""Evaluation updates its metrics on the device: torchmetrics' input checks (which read values back) run on the
first batch of each evaluation only, and cadence's CrossEntropy sums without a NaN check per batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence import Callback, Classifier, Event, Trainer
from cadence.metrics import CrossEntropy


class ChecksSeen(Callback):
    """Records, at each eval batch's start, whether the accuracy metric validates its inputs."""

    def __init__(self) -> None:
        self.validating: list[bool] = []

    def eval_batch_start(self, state: Any, logger: Any) -> None:
        self.validating.append(state.eval_metrics["MulticlassAccuracy"].validate_args)


def _batches(count: int, device: str = "cpu", classes: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(8, 4, generator=generator).to(device),
            torch.randint(0, classes, (8,), generator=generator).to(device),
        )
        for _ in range(count)
    ]


def test_metric_inputs_are_checked_on_the_first_batch_of_each_evaluation() -> None:
    seen = ChecksSeen()
    batches = _batches(3)
    model = Classifier(nn.Linear(4, 3), num_classes=3)
    trainer = Trainer(model=model, eval_dataloader=batches, callbacks=[seen], device="cpu", progress_bar=False)
    results = trainer.eval()
    trainer.eval()
    assert seen.validating == [True, False, False] * 2
    assert trainer.state.eval_metrics["MulticlassAccuracy"].validate_args is True
    logits = torch.cat([model.module(x) for x, _ in batches]).detach()
    labels = torch.cat([y for _, y in batches])
    assert results["MulticlassAccuracy"] == pytest.approx(float((logits.argmax(1) == labels).float().mean()))
    assert results["CrossEntropy"] == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-6)
    misshapen = [(batches[0][0], torch.zeros(8, 2, dtype=torch.long))]
    with pytest.raises(ValueError, match="should have the same shape"):
        trainer.eval(misshapen)  # the first batch is still checked


def test_cross_entropy_is_the_mean_over_samples_and_a_nan_shows() -> None:
    metric = CrossEntropy()
    logits, labels = torch.randn(10, 4, generator=torch.Generator().manual_seed(1)), torch.arange(10) % 4
    metric.update(logits[:3], labels[:3])
    metric.update(logits[3:], labels[3:])
    assert float(metric.compute()) == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-6)
    metric.update(torch.full((1, 4), float("nan")), labels[:1])
    assert torch.isnan(metric.compute())


@pytest.mark.gpu
def test_evaluation_does_not_synchronise_after_its_first_batch() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")

    class NoSync(Callback):
        def __init__(self) -> None:
            self.batches = 0

        def run_event(self, event: Event, state: Any, logger: Any) -> None:
            if event is Event.EVAL_BATCH_START and self.batches >= 1:
                torch.cuda.set_sync_debug_mode("error")
            elif event is Event.EVAL_BATCH_END:
                torch.cuda.set_sync_debug_mode("default")
                self.batches += 1

    watcher = NoSync()
    model = Classifier(nn.Linear(4, 3), num_classes=3)
    trainer = Trainer(
        model=model, eval_dataloader=_batches(4, "cuda"), callbacks=[watcher], device="gpu", progress_bar=False
    )
    try:
        trainer.eval()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watcher.batches == 4
