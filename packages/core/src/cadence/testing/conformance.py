"""The conformance checks every method package runs against itself (`MethodConformance`).

A method package subclasses `MethodConformance` in its own tests and says how to build
its algorithm (and, where it needs them, its functional calls and model)::

    class TestMixUpConformance(MethodConformance):
        def make_algorithm(self):
            return MixUp(alpha=0.4)

        def functional_calls(self):
            return {"mixup_batch": lambda x, y: mixup_batch(x, y)[0]}

pytest then collects every ``test_*`` method below. The checks, all on a tiny CPU model:
the functional keeps dtype and device (and shape, unless the method resizes); the
algorithm trains two batches; its ``state_dict`` round-trips through a checkpoint file;
a run resumed from a mid-epoch checkpoint ends bitwise equal to the uninterrupted run;
it composes with a no-op method without changing the result; it handles batch sizes 1,
2, 3 and an odd last batch; it is never matched on an event it did not declare; its
``check_applicable`` accepts the batches it trains on; a method that draws random numbers
takes ``seed=`` and is reproducible from it.
"""

from __future__ import annotations

import copy
import io
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from cadence.algorithm import Algorithm, Effects
from cadence.callback import Callback
from cadence.engine import check_composition
from cadence.event import Event
from cadence.loggers.in_memory import InMemoryLogger
from cadence.ops.method import RandomMethod
from cadence.state import State
from cadence.testing.builders import NoOpAlgorithm, image_dataset, sgd_trainer, tiny_image_classifier
from cadence.testing.checks import assert_same_tensors
from cadence.trainer import Trainer

__all__ = ["MethodConformance"]


class _EventSpy(Callback):
    """Asks the algorithm's match on every event it did not declare, and records any yes."""

    def __init__(self, algorithm: Algorithm):
        self.algorithm = algorithm
        self.undeclared: set[Event] = set()

    def run_event(self, event: Event, state: State, logger: Any) -> None:
        if event not in self.algorithm.events and self.algorithm.match(event, state):
            self.undeclared.add(event)


class MethodConformance:
    """The contract every method meets. Subclass it as ``Test<Method>Conformance``."""

    num_classes: int = 4
    image_shape: tuple[int, ...] = (3, 32, 32)
    batch_size: int = 4
    #: batch sizes the method must handle (it must reject the others when constructed)
    supported_batch_sizes: tuple[int, ...] = (1, 2, 3, 7)
    #: False for methods whose functional changes the spatial size (resizing, row/column drops)
    functional_preserves_shape: bool = True
    functional_dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64)
    #: the trainer's precision ("amp_bf16" runs under bf16 autocast, which the CPU has): for methods that act
    #: only under autocast, such as the low-precision norms
    precision: str = "fp32"

    # What the package provides ---------------------------------------------------------
    def make_algorithm(self) -> Algorithm:
        raise NotImplementedError(f"{type(self).__name__} must implement make_algorithm()")

    def functional_calls(self) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        """Functional entry points as ``fn(images, labels) -> images``."""
        return {}

    def make_model(self) -> nn.Module:
        return tiny_image_classifier(self.num_classes, self.image_shape[0])

    def make_dataset(self, num_samples: int, seed: int = 0) -> Dataset:
        """Training samples; a text method returns dicts (``input_ids``, ``attention_mask``, ``labels``),
        which the DataLoader collates into dict batches."""
        return image_dataset(num_samples, self.num_classes, self.image_shape, seed)

    # Helpers --------------------------------------------------------------------------
    def _trainer(
        self,
        algorithms: list[Algorithm],
        *,
        num_samples: int = 16,
        batch_size: int | None = None,
        max_duration: str = "2ba",
        **kwargs: Any,
    ) -> Trainer:
        torch.manual_seed(0)
        kwargs.setdefault("precision", self.precision)
        model, dataset = self.make_model(), self.make_dataset(num_samples)
        batch_size = batch_size or self.batch_size
        return sgd_trainer(model, dataset, algorithms, batch_size=batch_size, max_duration=max_duration, **kwargs)

    @staticmethod
    def _inputs(dtype: torch.dtype, shape: tuple[int, ...], num_classes: int) -> Iterator[tuple[torch.Tensor, ...]]:
        generator = torch.Generator().manual_seed(1)
        images = torch.rand((6, *shape), generator=generator).to(dtype)
        labels = torch.randint(0, num_classes, (6,), generator=generator)
        yield images, labels

    # The checks -----------------------------------------------------------------------
    def test_declarations(self) -> None:
        algorithm = self.make_algorithm()
        assert isinstance(algorithm, Algorithm)
        assert algorithm.events, f"{algorithm.name} must declare the events it runs on (class attribute `events`)"
        assert all(isinstance(e, Event) for e in algorithm.events)
        assert isinstance(type(algorithm).order, int)
        assert isinstance(algorithm.effects(), Effects)
        assert "0x" not in repr(algorithm), f"repr must show the hyperparameters, got {algorithm!r}"

    def test_functional_keeps_dtype_and_device(self) -> None:
        for name, call in self.functional_calls().items():
            for dtype in self.functional_dtypes:
                for images, labels in self._inputs(dtype, self.image_shape, self.num_classes):
                    out = call(images.clone(), labels.clone())
                    assert isinstance(out, torch.Tensor), f"{name} must return a tensor here"
                    assert out.dtype == images.dtype, f"{name} changed dtype {images.dtype} -> {out.dtype}"
                    assert out.device == images.device, f"{name} changed device"
                    if self.functional_preserves_shape:
                        assert out.shape == images.shape, f"{name} changed shape {images.shape} -> {out.shape}"
                    else:
                        assert out.shape[:2] == images.shape[:2], f"{name} changed batch or channel dims"

    def test_trains_two_batches(self) -> None:
        logger = InMemoryLogger()
        trainer = self._trainer([self.make_algorithm()], loggers=[logger])
        before = copy.deepcopy(trainer.state.model.state_dict())
        trainer.fit()
        _, losses = logger.steps_and_values("loss/train/total")
        assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
        after = trainer.state.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before), "training changed no weights"

    def test_state_dict_round_trips(self) -> None:
        trainer = self._trainer([self.make_algorithm()])
        trainer.fit()
        saved = trainer.state.algorithms[0].state_dict()
        buffer = io.BytesIO()
        torch.save(saved, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)  # checkpoints load this way
        fresh = self.make_algorithm()
        fresh.load_state_dict(loaded)
        assert_same_tensors(saved, fresh.state_dict(), f"{fresh.name}.state_dict()")

    def test_exact_resume_mid_epoch(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            whole = self._trainer(
                [self.make_algorithm()], max_duration="6ba", save_folder=Path(folder) / "a", save_interval="3ba"
            )
            whole.fit()
            resumed = self._trainer(
                [self.make_algorithm()], max_duration="6ba", load_path=Path(folder) / "a" / "ep0-ba3.pt"
            )
            assert resumed.state.timestamp.batch == 3
            resumed.fit()
            assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
            assert_same_tensors(
                whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "optimizer"
            )
            assert_same_tensors(
                whole.state.algorithms[0].state_dict(), resumed.state.algorithms[0].state_dict(), "algorithm"
            )

    def test_composes_with_noop(self) -> None:
        check_composition([])
        check_composition([self.make_algorithm(), NoOpAlgorithm()])
        alone = self._trainer([self.make_algorithm()])
        alone.fit()
        with_noop = self._trainer([NoOpAlgorithm(), self.make_algorithm(), NoOpAlgorithm()])
        with_noop.fit()
        assert_same_tensors(alone.state.model.state_dict(), with_noop.state.model.state_dict(), "model")

    def test_batch_sizes_and_odd_last_batch(self) -> None:
        for batch_size in self.supported_batch_sizes:
            self._trainer(
                [self.make_algorithm()], num_samples=batch_size, batch_size=batch_size, max_duration="1ep"
            ).fit()
        # 7 samples in batches of 3: the last batch has 1 sample
        self._trainer([self.make_algorithm()], num_samples=7, batch_size=3, max_duration="1ep").fit()

    def test_matches_only_declared_events(self) -> None:
        algorithm = self.make_algorithm()
        spy = _EventSpy(algorithm)
        trainer = self._trainer(
            [algorithm],
            callbacks=[spy],
            max_duration="1ep",
            eval_dataloader=DataLoader(self.make_dataset(4, seed=1), batch_size=2),
        )
        trainer.fit()
        assert not spy.undeclared, (
            f"{algorithm.name}.match returned True on undeclared events {sorted(e.value for e in spy.undeclared)}; "
            "add them to `events`"
        )

    def test_accepts_its_own_batches(self) -> None:
        batch = next(iter(DataLoader(self.make_dataset(4), batch_size=2)))
        self.make_algorithm().check_applicable(self.make_model(), batch)

    def test_random_methods_take_a_seed(self) -> None:
        algorithm = self.make_algorithm()
        if not isinstance(algorithm, RandomMethod):
            return
        import inspect

        seed = inspect.signature(type(algorithm)).parameters.get("seed")
        assert seed is not None and seed.kind is inspect.Parameter.KEYWORD_ONLY and seed.default is None, (
            f"{algorithm.name} draws random numbers: its constructor takes a keyword-only `seed: int | None = None`"
        )
        runs = []
        for _ in range(2):
            seeded = type(algorithm)(**{**algorithm.hparams(), "seed": 5})
            trainer = self._trainer([seeded])
            trainer.fit()
            runs.append(trainer.state.model.state_dict())
        assert_same_tensors(runs[0], runs[1], f"two runs of {algorithm.name}(seed=5)")
