"""Every installed method trains under ``Trainer(compile_config=...)``, and once warmed up its steps compile nothing
new: a method that changed a Python number or a guarded attribute every step (a counter, a rate) would make Dynamo
compile the step again each time, and a compiled run would spend its time compiling. The ``eager`` backend traces
and guards as Inductor does, without generating kernels. Shape-changing methods: `test_compile_shapes.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from cadence import Trainer
from cadence.registry import registry
from cadence.testing import image_dataset

sys.path.insert(0, str(Path(__file__).parent))  # pytest imports tests by path (importlib mode): find the neighbour
from test_composition import AGNOSTIC, NUM_CLASSES, TEXT, VISION, text_dataset, text_model, vision_model

FACTORIES = {**AGNOSTIC, **VISION, **TEXT}
MAX_GRAPHS = 6  # forward and loss, their recompiles with a dynamic number, and graph breaks (stochastic depth's draw)
# Methods that change what the step computes at some points of the run, and so recompile there: at most this many
# graphs per 4 batches (2 epochs) once warmed up. Layer freezing takes layers out of the backward at epoch ends.
RECOMPILES = {"layer_freezing": 2}


def _graphs(trainer: Trainer) -> int:
    assert trainer.compiled is not None
    return int(trainer.compiled.report()["trainer/compiled_graphs"])


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_a_compiled_run_stops_compiling_once_warmed_up(name: str) -> None:
    if name not in registry().methods:
        pytest.skip(f"{name} is not installed")
    torch._dynamo.reset()
    torch.manual_seed(0)
    text = name in TEXT
    model = text_model() if text else vision_model()
    dataset = text_dataset(8) if text else image_dataset(8, num_classes=NUM_CLASSES)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        algorithms=[FACTORIES[name]()],
        precision="amp_bf16",
        seed=0,
        device="cpu",
        progress_bar=False,
        compile_config={"backend": "eager"},
    )
    trainer.fit()
    warmed = _graphs(trainer)
    trainer.fit(duration="4ba")
    assert 1 <= warmed <= MAX_GRAPHS, f"{name}: {warmed} graphs in 4 batches"
    more = _graphs(trainer) - warmed
    assert more <= RECOMPILES.get(name, 0), f"{name}: 4 more batches compiled {more} more graphs"
