"""Two optimizer steps over batches of 8 equal the same steps over microbatches of 2 (gradient accumulation),
method by method, within float rounding. A method that counts forwards where it means steps (Gyro Dropout did,
so its masks changed 4x as often with 4 microbatches) or draws per microbatch what belongs to the batch gives
another run for another microbatch size, which `device_train_microbatch_size="auto"` may pick on its own.

The model is `test_composition`'s vision model with GroupNorm in place of BatchNorm, whose batch statistics are
per microbatch by nature.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # pytest imports tests by path (importlib mode): find the neighbour
from test_composition import AGNOSTIC, NUM_CLASSES, VISION, vision_model
from torch import nn
from torch.utils.data import DataLoader

from cadence import Trainer
from cadence.registry import registry
from cadence.testing import image_dataset

# Each microbatch draws its own mixing, box or drops, as in Composer (their cards' "Microbatches" notes).
PER_MICROBATCH = {"cutmix", "mixup", "stochastic_depth"}
NEEDS_BATCHNORM = {"ghost_batchnorm"}  # it splits BatchNorm's statistics: per microbatch by nature
# They act under bf16 autocast only, where rounding alone moves the weights with the microbatch size about as much as
# these norms do (here 1.7e-4 without a method, 3.9e-4 with low-precision LayerNorm); they keep nothing between
# forwards.
UNDER_AUTOCAST = {"low_precision_groupnorm", "low_precision_layernorm"}
FACTORIES = {n: f for n, f in sorted({**VISION, **AGNOSTIC}.items()) if n not in NEEDS_BATCHNORM | UNDER_AUTOCAST}


def _without_batchnorm() -> nn.Module:
    model = vision_model()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                setattr(module, name, nn.GroupNorm(2, child.num_features))
    return model


def _trained(name: str, microbatch: int | None) -> dict[str, torch.Tensor]:
    """The weights after two steps with method `name`, in microbatches of `microbatch` or whole batches."""
    torch.manual_seed(0)
    model = _without_batchnorm()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16, NUM_CLASSES), batch_size=8),
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[FACTORIES[name]()],
        device_train_microbatch_size=microbatch,
        seed=0,
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    state = trainer.state.model.state_dict()
    return {key: value.detach().clone() for key, value in state.items() if isinstance(value, torch.Tensor)}


def _largest_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(
        (a[k].double() - b[k].double()).abs().max().item() if a[k].is_floating_point() else float(not a[k].equal(b[k]))
        for k in a
    )


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_microbatches_give_the_whole_batchs_steps(name: str) -> None:
    if name not in registry().methods:
        pytest.skip(f"{name} is not installed")
    difference = _largest_difference(_trained(name, None), _trained(name, 2))
    if name in PER_MICROBATCH:
        assert difference > 1e-4, f"{name} no longer draws per microbatch: take it out of PER_MICROBATCH"
    else:
        assert difference <= 1e-5, f"{name}: 4 microbatches of 2 moved the weights by {difference:.2e}"
