"""The workload `harness_step` times both ways: synthetic 32x32 images, a near-zero-cost model, the batches
and evaluation a hand-written loop makes with the harness's own kernels, and a temporary MLflow store."""

from __future__ import annotations

import tempfile
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
    "MLflowStore",
    "hand_batches",
    "hand_eval",
    "tiny_model",
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
        tensors = (t.to(device) for t in (images.train_x, images.train_y, images.test_x, images.test_y))
        return cls(*tensors, batch_size=batch_size, device=device)

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
