"""The methods that change a batch's shape keep a compiled run's graphs few (issue 13).

Progressive resizing grows the images every few batches, ColOut drops rows and columns, selective
backprop trains on a subset of each batch. Under ``Trainer(compile_config=...)`` each new shape fails a
guard; Dynamo then marks the changing dimension dynamic, so a run compiles a handful of graphs, not one
per shape. The ``eager`` backend traces and guards as Inductor does, without generating kernels.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from cadence import Classifier, Trainer
from cadence.loggers import InMemoryLogger
from cadence.registry import registry
from cadence.testing import TinyCNN, image_dataset

BATCHES = 16
SHAPE_METHODS: dict[str, dict[str, Any]] = {
    # every size from 16 to 32 in steps of 4 within the 16 batches
    "progressive_resizing": {"initial_scale": 0.5, "delay_fraction": 0.0, "finetune_fraction": 0.25},
    "colout": {"p_row": 0.15, "p_col": 0.15, "batch": True},
    "selective_backprop": {"start": 0.0, "end": 1.0, "keep": 0.5, "interrupt": 0},
}
MAX_GRAPHS = 4  # forward and loss, each compiled again once with a dynamic dimension


def _graphs(method: Any | None) -> tuple[int, set[tuple[int, ...]]]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Classifier(TinyCNN(num_classes=4), num_classes=4)
    shapes: set[tuple[int, ...]] = set()
    model.register_forward_pre_hook(lambda _, args: shapes.add(tuple(args[0][0].shape)))
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(BATCHES * 8), batch_size=8),
        max_duration=f"{BATCHES}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[method] if method is not None else [],
        loggers=[logger],
        device="cpu",
        seed=0,
        progress_bar=False,
        compile_config={"backend": "eager"},
    )
    trainer.fit()
    return int(logger.data["trainer/compiled_graphs"][-1][1]), shapes


@pytest.mark.parametrize("name", sorted(SHAPE_METHODS))
def test_a_shape_changing_method_compiles_a_bounded_number_of_graphs(name: str) -> None:
    info = registry().methods.get(name)
    if info is None:
        pytest.skip(f"{name} is not installed")
    graphs, shapes = _graphs(info.algorithm(**SHAPE_METHODS[name]))
    assert shapes != {(8, 3, 32, 32)}, f"{name} left every batch at 8x3x32x32, so this test measures nothing"
    assert graphs <= MAX_GRAPHS, f"{name}: {graphs} graphs for {len(shapes)} input shapes {sorted(shapes)}"


def test_without_a_shape_changing_method_the_forward_and_the_loss_compile_once_each() -> None:
    graphs, shapes = _graphs(None)
    assert shapes == {(8, 3, 32, 32)} and graphs == 2
