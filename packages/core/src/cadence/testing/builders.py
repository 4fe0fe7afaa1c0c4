"""What a method's tests train: tiny models, seeded datasets, a no-op method and a few-step Trainer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from cadence.algorithm import Algorithm
from cadence.event import Event
from cadence.models.base import Model
from cadence.models.classifier import Classifier
from cadence.ops.targets import soft_cross_entropy
from cadence.state import State
from cadence.trainer import Trainer

__all__ = [
    "DictImageClassifier",
    "DictImageDataset",
    "NoOpAlgorithm",
    "TinyCNN",
    "digits_datasets",
    "image_dataset",
    "mlp_classifier",
    "sgd_trainer",
    "tiny_image_classifier",
]


class NoOpAlgorithm(Algorithm):
    """Matches every event and changes nothing: the neutral element of composition."""

    events = tuple(Event)

    def match(self, event: Event, state: State) -> bool:
        return True

    def apply(self, event: Event, state: State, logger: Any) -> None:
        return None


class TinyCNN(nn.Module):
    """conv-BN-ReLU, a strided conv, global pooling, linear: enough structure for every method."""

    def __init__(self, num_classes: int = 4, in_channels: int = 3):
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def tiny_image_classifier(num_classes: int = 4, in_channels: int = 3) -> Classifier:
    return Classifier(TinyCNN(num_classes, in_channels), num_classes=num_classes)


def mlp_classifier(in_features: int = 64, num_classes: int = 10, hidden: int = 32, dropout: float = 0.0) -> Classifier:
    layers: list[nn.Module] = [nn.Linear(in_features, hidden), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, num_classes))
    return Classifier(nn.Sequential(*layers), num_classes=num_classes)


def sgd_trainer(
    model: Classifier | nn.Module,
    dataset: Dataset,
    algorithms: list[Algorithm] | None = None,
    *,
    batch_size: int = 4,
    max_duration: str = "2ba",
    lr: float = 0.05,
    seed: int = 17,
    shuffle: bool = True,
    **kwargs: Any,
) -> Trainer:
    """The few-step CPU run of a method's tests: `model` trained on `dataset` with SGD (momentum 0.9),
    no progress bar; `kwargs` go to the Trainer. Seed the model's construction first (``torch.manual_seed``)."""
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=batch_size, shuffle=shuffle),
        max_duration=max_duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
        algorithms=algorithms if algorithms is not None else [],
        seed=seed,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def digits_datasets() -> tuple[TensorDataset, TensorDataset]:
    """sklearn's bundled digits (real data, no download): 1500 train and 297 test 8x8 images, flattened."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target)
    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])


def image_dataset(
    num_samples: int, num_classes: int = 4, shape: tuple[int, ...] = (3, 32, 32), seed: int = 0
) -> TensorDataset:
    """Random images in [0, 1] with integer labels, the same for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand((num_samples, *shape), generator=generator)
    labels = torch.randint(0, num_classes, (num_samples,), generator=generator)
    return TensorDataset(images, labels)


class DictImageDataset(Dataset):
    """`image_dataset` with dict samples ``{"image": ..., "label": ...}``, which the DataLoader collates into
    dict batches: for a method's ``input_key``/``target_key``."""

    def __init__(self, num_samples: int, num_classes: int = 4, shape: tuple[int, ...] = (3, 8, 8), seed: int = 0):
        self.data = image_dataset(num_samples, num_classes, shape, seed)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        image, label = self.data[index]
        return {"image": image, "label": label}


class DictImageClassifier(Model):
    """`TinyCNN` for dict batches: classifies ``batch["image"]``, scores against ``batch["label"]`` (hard or
    soft targets, as `soft_cross_entropy` takes them)."""

    def __init__(self, num_classes: int = 4, in_channels: int = 3):
        super().__init__()
        self.net = TinyCNN(num_classes, in_channels)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(batch["image"])

    def loss(self, outputs: torch.Tensor, batch: dict[str, torch.Tensor], **kwargs: Any) -> torch.Tensor:
        return soft_cross_entropy(outputs, batch["label"], **kwargs)
