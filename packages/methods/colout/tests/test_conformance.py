"""ColOut meets the contract every cadence method meets, in batch and in sample mode."""

from __future__ import annotations

import torch
from cadence_colout import ColOut, colout_batch
from torch.utils.data import Dataset

from cadence.testing import MethodConformance


class TestColOutConformance(MethodConformance):
    functional_preserves_shape = False

    def make_algorithm(self) -> ColOut:
        return ColOut()

    def functional_calls(self):
        return {
            "colout_batch": lambda x, y: colout_batch(x, generator=torch.Generator().manual_seed(0)),
            "colout_batch(batch=False)": lambda x, y: colout_batch(x, batch=False),
        }


class _WithTransform(Dataset):
    """`image_dataset` with a torchvision-style ``transform`` on each CHW image (sample mode adds to it)."""

    def __init__(self, images: Dataset):
        self.images, self.transform = images, None

    def __len__(self) -> int:
        return len(self.images)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        image, label = self.images[index]
        return (self.transform(image) if self.transform is not None else image), label


class TestColOutSampleModeConformance(TestColOutConformance):
    def make_algorithm(self) -> ColOut:
        return ColOut(p_row=0.25, p_col=0.25, batch=False)

    def make_dataset(self, num_samples: int, seed: int = 0) -> Dataset:
        return _WithTransform(super().make_dataset(num_samples, seed))
