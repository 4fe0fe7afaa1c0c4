"""Trainer(compile_config=...): torch.compile of the forward and the loss, with a bounded number of graphs.

The tests compile with the ``eager`` backend: Dynamo traces and guards exactly as with Inductor, but
no kernels are generated, so the numbers are bit-identical to an uncompiled run and the tests stay
fast on a CPU. `make bench` times the Inductor-compiled step.
"""

from __future__ import annotations

import collections

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
    assert compiled_log.data["trainer/graph_breaks"][-1][1] == 0
    assert compiled_log.data["trainer/compile_disabled"][-1][1] == 0
    assert compiled.compiled is not None and compiled.compiled.report()["trainer/compiled_graphs"] >= 1
    assert "trainer/compiled_graphs" not in eager_log.data and eager.compiled is None


def test_a_compile_that_torch_disabled_is_named_not_silently_run_eagerly() -> None:
    """TORCH_COMPILE_DISABLE=1 makes torch.compile a no-op: the run must say so, and its report must show it."""
    disabled = r"torch\.compile is disabled in this process \(TORCH_COMPILE_DISABLE=1"
    with torch._dynamo.config.patch(disable=True), pytest.warns(UserWarning, match=disabled):
        _, logger = _train(_images([32] * 2), compile_config=EAGER)
    assert logger.data["trainer/compile_disabled"][-1][1] == 1
    assert logger.data["trainer/compiled_graphs"][-1][1] == 0


class _SkippedByDynamo(Classifier):
    """A model whose forward and loss Dynamo must not trace: a compile that compiles nothing."""

    @torch.compiler.disable
    def forward(self, batch):
        return super().forward(batch)

    @torch.compiler.disable
    def loss(self, outputs, batch, *args, **kwargs):
        return super().loss(outputs, batch, *args, **kwargs)


def test_a_first_step_that_compiled_nothing_is_named(monkeypatch) -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.utils, "counters", type(counters)(counters.default_factory))
    model = _SkippedByDynamo(TinyCNN(num_classes=4), num_classes=4)
    trainer = Trainer(model=model, train_dataloader=_images([32] * 2), max_duration="2ba", device="cpu",
                      progress_bar=False, compile_config=EAGER)  # fmt: skip
    with pytest.warns(UserWarning, match=r"the first training step compiled no graph"):
        trainer.fit()
    assert trainer.compiled is not None and trainer.compiled.report()["trainer/compiled_graphs"] == 0


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


def test_a_first_step_under_a_flop_counter_runs_eagerly_and_the_run_still_compiles() -> None:
    """torch up to 2.13 never compiles code first met under a TorchDispatchMode: a FLOP-counted first step
    (as the harness counts every new shape) would leave the whole run eager. That step must run eagerly, count
    the eager FLOPs, and the steps after it run compiled."""
    from torch.utils.flop_counter import FlopCounterMode

    from cadence import Callback

    class CountFirstStep(Callback):
        def __init__(self) -> None:
            self.mode = FlopCounterMode(display=False)
            self.flops = 0

        def before_forward(self, state, logger) -> None:
            if int(state.timestamp.batch) == 0:
                self.mode.__enter__()

        def after_backward(self, state, logger) -> None:
            if int(state.timestamp.batch) == 0:
                self.mode.__exit__(None, None, None)
                self.flops = self.mode.get_total_flops()

    class _Fresh(Classifier):  # code Dynamo has not met in this process: its first call is under the mode
        def forward(self, batch):
            return self.module(batch[0])

    torch._dynamo.reset()
    counter = CountFirstStep()
    model = _Fresh(TinyCNN(num_classes=4), num_classes=4)
    trainer = Trainer(model=model, train_dataloader=_images([32] * 3), max_duration="3ba", device="cpu",
                      progress_bar=False, compile_config=EAGER, callbacks=[counter])  # fmt: skip
    trainer.fit()
    assert counter.flops > 0
    report = trainer.compiled.report()  # type: ignore[union-attr]
    assert report["trainer/eager_calls"] == 1  # the counted step
    assert trainer.compiled.forward.compiled_calls == 2  # type: ignore[union-attr]
    assert report["trainer/compiled_graphs"] >= 1, "the steps after the counted one did not compile"


def test_the_compiled_loss_outlives_the_next_step_as_a_cuda_graph_output_would_not() -> None:
    """Under CUDA graphs a compiled function returns the same static buffer every call, overwritten by the next
    replay; the loggers and the non-finite check read a step's loss later, so the loss must be a copy."""
    from cadence._compilation import CompiledStep

    step = CompiledStep(nn.Identity(), lambda outputs, batch: outputs.sum(), EAGER)
    static = torch.zeros(())

    def replay(outputs, batch):  # what a CUDA graph does: write into its one output buffer and return it
        static.copy_(outputs.sum())
        return static

    step._loss.compiled = replay
    first = step.loss(torch.ones(3), None)
    second = step.loss(torch.full((3,), 2.0), None)
    assert (float(first), float(second)) == (3.0, 6.0)
    step._loss.compiled = lambda outputs, batch: {"a": replay(outputs, batch), "b": (replay(outputs, batch),)}
    first_parts = step.loss(torch.ones(3), None)
    step.loss(torch.full((3,), 2.0), None)
    assert float(first_parts["a"]) == float(first_parts["b"][0]) == 3.0
    losses = collections.namedtuple("Losses", "ce aux")
    step._loss.compiled = lambda outputs, batch: losses(replay(outputs, batch), 1.0)
    first_named = step.loss(torch.ones(3), None)
    step.loss(torch.full((3,), 2.0), None)
    assert type(first_named) is losses and float(first_named.ce) == 3.0 and first_named.aux == 1.0
