"""The workload `harness_step` times both ways: synthetic 32x32 images, a near-zero-cost model, the batches
and evaluation a hand-written loop makes with the harness's own kernels, the hand-written loop itself
(`HandTwin`) with the steps its evaluations fall before, and a temporary MLflow store."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cadence_harness.running import loaders
from cadence_harness.running.data import synthetic_images

__all__ = [
    "CLASSES",
    "CPU",
    "EVAL_BATCHES",
    "EVAL_BATCH_SIZE",
    "IMAGE_SIZE",
    "STEPS_PER_EPOCH",
    "Data",
    "HandTwin",
    "MLflowStore",
    "hand_batches",
    "hand_eval",
    "harness_eval_steps",
    "tiny_model",
    "twin_eval_steps",
]

STEPS_PER_EPOCH, EVAL_BATCHES = 64, 8  # CIFAR-10 at batch 512 / eval batch 1024 has about 98 and 10
EVAL_BATCH_SIZE = 256
IMAGE_SIZE, CLASSES = 32, 10
CPU = torch.device("cpu")


@dataclass
class Data:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    batch_size: int
    device: torch.device

    @classmethod
    def build(cls, batch_size: int, device: torch.device = CPU) -> Data:
        images = synthetic_images(STEPS_PER_EPOCH * batch_size, EVAL_BATCHES * EVAL_BATCH_SIZE, IMAGE_SIZE, CLASSES)
        train_x, train_y, test_x, test_y = (
            t.to(device) for t in (images.train_x, images.train_y, images.test_x, images.test_y)
        )
        return cls(train_x, train_y, test_x, test_y, batch_size=batch_size, device=device)

    def train_loader(self) -> loaders.TensorLoader:
        augment = loaders.make_augment("flip_crop", IMAGE_SIZE)
        return loaders.TensorLoader(
            (self.train_x, self.train_y), batch_size=self.batch_size, shuffle=True, drop_last=True, augment=augment
        )

    def eval_loader(self) -> loaders.TensorLoader:
        return loaders.TensorLoader((self.test_x, self.test_y), batch_size=EVAL_BATCH_SIZE, shuffle=False)


def tiny_model(device: torch.device = CPU) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * IMAGE_SIZE * IMAGE_SIZE, CLASSES)).to(device)


def hand_batches(data: Data, epoch: int, generator: torch.Generator, augment: loaders.FlipCrop) -> Any:
    """The batches a hand-written loop makes with the same kernels: a permutation, then per batch the flipped
    and cropped images gathered in one copy (`FlipCrop.gather`), scaled to [0, 1], and their labels."""
    order = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(epoch)).to(data.device)
    for start in range(0, STEPS_PER_EPOCH * data.batch_size, data.batch_size):
        index = order[start : start + data.batch_size]
        yield augment.gather(data.train_x, index, generator).div(255), data.train_y.index_select(0, index)


@torch.no_grad()
def hand_eval(model: nn.Module, data: Data) -> tuple[float, float]:
    """Accuracy and mean cross-entropy (the harness's two eval metrics), summed on the device, read back once."""
    model.eval()
    correct, loss = torch.zeros((), dtype=torch.long, device=data.device), torch.zeros((), device=data.device)
    for start in range(0, len(data.test_y), EVAL_BATCH_SIZE):
        images, labels = (
            data.test_x[start : start + EVAL_BATCH_SIZE].div(255),
            data.test_y[start : start + EVAL_BATCH_SIZE],
        )
        logits = model(images)
        correct += (logits.argmax(1) == labels).sum()
        loss += F.cross_entropy(logits, labels, reduction="sum")
    model.train()
    return correct.item() / len(data.test_y), loss.item() / len(data.test_y)


def harness_eval_steps(steps: int) -> range:
    """The steps (1-based) whose span holds one of the harness's evaluations in a run of `steps`: the Trainer
    evaluates after each epoch's last step, before the next step's batch (the last one, after the run's last
    step, falls in no step)."""
    return range(STEPS_PER_EPOCH + 1, steps + 1, STEPS_PER_EPOCH)


def twin_eval_steps(steps: int) -> frozenset[int]:
    """The steps the hand-written twin evaluates before: half an epoch before each of the harness's, as many.

    In lockstep, an evaluation run right after the other loop's found the evaluation's code and memory warm: two
    identical hand-written loops, the first evaluating just before the second each epoch, differed by 36-75 us
    per step on a 2-CPU VM (the second's evaluations about 2.8 ms shorter), a bias against whichever loop
    evaluates first, which was the harness. Half an epoch apart, each evaluation follows 32 steps of both loops'
    training (the A/A control in `harness_step` measures what is left)."""
    return frozenset(step - STEPS_PER_EPOCH // 2 for step in harness_eval_steps(steps))


class HandTwin:
    """The hand-written loop, one step per `step()`: the batch (`hand_batches`), zero_grad, forward,
    cross-entropy, backward, SGD with momentum; `hand_eval` before each step in `eval_steps` (1-based)."""

    def __init__(self, data: Data, eval_steps: Collection[int]) -> None:
        self.data, self.model = data, tiny_model(data.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.eval_steps, self.steps = frozenset(eval_steps), 0
        self._batches = self._epochs(torch.Generator(device=data.device), loaders.FlipCrop(IMAGE_SIZE // 8))

    def evaluate_if_due(self) -> None:
        """Count the step about to run; evaluate first when it is one of `eval_steps`."""
        self.steps += 1
        if self.steps in self.eval_steps:
            hand_eval(self.model, self.data)

    def _epochs(self, generator: torch.Generator, augment: loaders.FlipCrop) -> Iterator[Any]:
        for epoch in itertools.count():
            yield from hand_batches(self.data, epoch, generator, augment)

    def step(self) -> None:
        self.evaluate_if_due()
        images, labels = next(self._batches)
        self.optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(images), labels).backward()
        self.optimizer.step()


class MLflowStore:
    """A temporary sqlite tracking store shared by the runs of this benchmark (created once)."""

    def __init__(self, device: torch.device = CPU) -> None:
        self.device = device
        self._folder = tempfile.TemporaryDirectory(prefix="cadence-harness-step-")
        self.uri = f"sqlite:///{Path(self._folder.name) / 'mlflow.db'}"
        self.spill = Path(self._folder.name) / "spill"

    def logger(self, out_of_process: bool | None = None) -> Any:
        from cadence.loggers import MLFlowLogger

        return MLFlowLogger(
            experiment_name="harness_step", tracking_uri=self.uri, spill_dir=self.spill, out_of_process=out_of_process
        )

    def close(self) -> None:
        self._folder.cleanup()
