"""Trainer(compile_config=...): torch.compile of the forward and the loss, with a bounded number of graphs.

The tests compile with the ``eager`` backend: Dynamo traces and guards exactly as with Inductor, but
no kernels are generated, so the numbers are bit-identical to an uncompiled run and the tests stay
fast on a CPU. `make bench` times the Inductor-compiled step.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence import Classifier, Trainer
from cadence.loggers import InMemoryLogger
from cadence.testing import TinyCNN

EAGER = {"backend": "eager"}


def _images(sizes: list[int], batch: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch, 3, size, size, generator=generator), torch.randint(0, 4, (batch,), generator=generator))
        for size in sizes
    ]


def _train(batches, compile_config=None, **kwargs) -> tuple[Trainer, InMemoryLogger]:
    torch.manual_seed(0)
    model = Classifier(TinyCNN(num_classes=4), num_classes=4)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        max_duration=f"{len(batches)}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        loggers=[logger],
        device="cpu",
        seed=0,
        progress_bar=False,
        compile_config=compile_config,
        **kwargs,
    )
    trainer.fit()
    return trainer, logger


def _losses(logger: InMemoryLogger) -> list[float]:
    return [float(value) for _, value in logger.data["loss/train/total"]]


def test_a_compiled_run_trains_exactly_like_an_eager_one_and_keeps_the_model_uncompiled() -> None:
    torch._dynamo.reset()
    batches = _images([32] * 6)
    eager, eager_log = _train(batches)
    compiled, compiled_log = _train(batches, compile_config=EAGER)

    assert _losses(compiled_log) == _losses(eager_log)
    for name, tensor in eager.state.model.state_dict().items():
        torch.testing.assert_close(compiled.state.model.state_dict()[name], tensor, rtol=0, atol=0)
    # state.model is the user's module (no "_orig_mod." keys in checkpoints, safe to deep-copy)
    assert type(compiled.state.model) is Classifier
    assert not any("_orig_mod" in key for key in compiled.state.model.state_dict())
    assert compiled_log.data["trainer/compiled_graphs"][-1][1] >= 1
    assert "trainer/compiled_graphs" not in eager_log.data


def test_changing_image_sizes_recompile_a_bounded_number_of_times() -> None:
    """Six sizes, as progressive resizing produces: automatic dynamic shapes keep it to a few graphs."""
    torch._dynamo.reset()
    _, logger = _train(_images([16, 20, 24, 28, 32, 32, 30, 26]), compile_config=EAGER)
    graphs = logger.data["trainer/compiled_graphs"][-1][1]
    assert 2 <= graphs <= 4, f"{graphs} graphs for 7 image sizes: the dynamic-shape fallback did not engage"


def test_a_checkpoint_of_a_compiled_run_loads_into_an_eager_trainer(tmp_path) -> None:
    torch._dynamo.reset()
    batches = _images([32] * 4)
    _train(batches, compile_config=EAGER, save_folder=tmp_path, save_interval="2ba")
    resumed, _ = _train(batches, load_path=tmp_path / "ep0-ba2.pt")
    assert int(resumed.state.timestamp.batch) == 4


def test_compile_config_is_validated_before_anything_runs() -> None:
    model = Classifier(nn.Sequential(nn.Flatten(), nn.Linear(12, 2)), num_classes=2)
    with pytest.raises(TypeError, match=r"compile_config=True: pass a dict of torch\.compile arguments"):
        Trainer(model=model, max_duration="1ba", compile_config=True)
    with pytest.raises(ValueError, match=r"torch.compile does not take: \['modee'\]"):
        Trainer(model=model, max_duration="1ba", compile_config={"modee": "max-autotune"})
