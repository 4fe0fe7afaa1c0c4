"""The Trainer: learning on real data, event counts, microbatching, evaluation, bad input."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, Classifier, Event, InMemoryLogger, Logger, State, Trainer
from cadence.testing import mlp_classifier, tiny_image_classifier


def test_learns_sklearn_digits(digits_loaders) -> None:
    train, test = digits_loaders
    torch.manual_seed(0)
    model = mlp_classifier()
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=train,
        eval_dataloader=test,
        max_duration="4ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        loggers=[logger],
        seed=0,
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    _, losses = logger.steps_and_values("loss/train/total")
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    steps, accuracy = logger.steps_and_values("metrics/eval/MulticlassAccuracy")
    assert steps == [47, 94, 141, 188]  # evaluated after every epoch (47 batches of 32)
    assert accuracy[-1] > 0.8  # chance is 0.1


def test_learns_fashion_mnist_from_the_shared_data(tiny_npz) -> None:
    data = np.load(tiny_npz)
    x = torch.tensor(data["fashion_mnist_x_train"], dtype=torch.float32).unsqueeze(1) / 255
    y = torch.tensor(data["fashion_mnist_y_train"])
    xt = torch.tensor(data["fashion_mnist_x_test"], dtype=torch.float32).unsqueeze(1) / 255
    yt = torch.tensor(data["fashion_mnist_y_test"])
    torch.manual_seed(0)
    model = tiny_image_classifier(num_classes=10, in_channels=1)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(TensorDataset(x, y), batch_size=25, shuffle=True),
        eval_dataloader=DataLoader(TensorDataset(xt, yt), batch_size=100),
        max_duration="8ep",
        optimizers=torch.optim.Adam(model.parameters(), lr=3e-3),
        seed=0,
        device="cpu",
        progress_bar=False,
    )
    before = trainer.eval()["MulticlassAccuracy"]
    trainer.fit()
    after = trainer.eval()["MulticlassAccuracy"]
    assert after > before + 0.2  # chance is 0.1; 8 epochs of 500 images lift it well above


class EventCounter(Callback):
    def __init__(self) -> None:
        self.counts: collections.Counter[Event] = collections.Counter()

    def run_event(self, event, state, logger) -> None:
        self.counts[event] += 1


@pytest.mark.parametrize(("microbatch", "per_batch"), [(None, 1), (4, 2), (3, 3)])
def test_event_counts_per_batch_and_microbatch(microbatch: int | None, per_batch: int) -> None:
    counter = EventCounter()
    data = TensorDataset(torch.randn(24, 8), torch.randint(0, 3, (24,)))  # 3 batches of 8 per epoch
    model = mlp_classifier(8, 3)
    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=8),
        max_duration="2ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=[counter],
        eval_dataloader=DataLoader(data, batch_size=12),
        eval_interval="3ba",
        device_train_microbatch_size=microbatch,
        progress_bar=False,
        seed=0,
    ).fit()
    batches, epochs = 6, 2
    c = counter.counts
    assert c[Event.INIT] == c[Event.BEFORE_LOAD] == c[Event.AFTER_LOAD] == c[Event.FIT_START] == c[Event.FIT_END] == 1
    assert c[Event.EPOCH_START] == c[Event.EPOCH_END] == c[Event.EPOCH_CHECKPOINT] == epochs
    for event in (
        Event.BEFORE_DATALOADER,
        Event.AFTER_DATALOADER,
        Event.BATCH_START,
        Event.BEFORE_TRAIN_BATCH,
        Event.AFTER_TRAIN_BATCH,
        Event.BATCH_END,
        Event.BATCH_CHECKPOINT,
    ):
        assert c[event] == batches, event
    for event in (
        Event.BEFORE_FORWARD,
        Event.AFTER_FORWARD,
        Event.BEFORE_LOSS,
        Event.AFTER_LOSS,
        Event.BEFORE_BACKWARD,
        Event.AFTER_BACKWARD,
    ):
        assert c[event] == batches * per_batch, event
    assert c[Event.EVAL_START] == c[Event.EVAL_END] == 2  # at batches 3 and 6
    assert c[Event.EVAL_BATCH_START] == 4


def _one_step(microbatch: int | None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = mlp_classifier(8, 3, hidden=16)
    data = TensorDataset(torch.randn(16, 8, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 3)
    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=16),
        max_duration="1ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.5),
        device_train_microbatch_size=microbatch,
        progress_bar=False,
        seed=0,
    ).fit()
    return model.state_dict()


def test_microbatches_give_the_gradient_of_the_whole_batch() -> None:
    whole, split = _one_step(None), _one_step(4)
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=0, atol=1e-6)
    odd = _one_step(5)  # 5 + 5 + 5 + 1: unequal microbatches are weighted by their size
    for name in whole:
        torch.testing.assert_close(odd[name], whole[name], rtol=0, atol=1e-6)


def test_duration_in_samples_and_batches_stops_mid_epoch() -> None:
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    for duration, batches in (("5ba", 5), ("48sp", 6)):
        model = mlp_classifier(4, 2)
        trainer = Trainer(
            model=model,
            train_dataloader=DataLoader(data, batch_size=8),
            max_duration=duration,
            optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
            progress_bar=False,
            seed=0,
        )
        trainer.fit()
        assert trainer.state.timestamp.batch == batches
        assert trainer.state.timestamp.epoch == 1 and trainer.state.timestamp.batch_in_epoch == batches - 5


def test_bf16_autocast_and_train_metrics_on_cpu(digits_loaders) -> None:
    train, _test = digits_loaders
    model = mlp_classifier()
    logger = InMemoryLogger()
    Trainer(
        model=model,
        train_dataloader=train,
        max_duration="1ep",
        precision="amp_bf16",
        loggers=[logger],
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        compute_train_metrics=True,
        progress_bar=False,
        seed=0,
    ).fit()
    assert 0.0 < logger.most_recent_values["metrics/train/MulticlassAccuracy"] <= 1.0


class _NoLoss(torch.nn.Module):
    def forward(self, batch):
        return batch


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"max_duration": "-1ep"}, ValueError, ">= 0"),
        ({"max_duration": "0ba"}, ValueError, "positive"),
        ({"max_duration": "1.5ep"}, ValueError, "only 'dur' may be fractional"),
        ({"max_duration": "0.5dur"}, ValueError, "positive amount of ep, ba, sp or tok"),
        ({"max_duration": 2.5}, TypeError, "expected a Time"),
        ({"device": "tpu"}, ValueError, "unknown device='tpu'"),
        ({"precision": "fp8"}, ValueError, "unknown precision='fp8'"),
        ({"device_train_microbatch_size": 64}, ValueError, "larger than the batch size 8"),
        ({"device_train_microbatch_size": 0}, ValueError, "must be an int >= 1"),
        ({"scale_schedule_ratio": 0}, ValueError, "scale_schedule_ratio=0"),
        ({"eval_interval": "1.5ep"}, ValueError, "eval_interval="),
        ({"save_interval": "-2ba"}, ValueError, "save_interval="),
        ({"autoresume": True}, ValueError, "autoresume=True needs save_folder"),
        ({"seed": -3}, ValueError, "seed=-3"),
        ({"optimizers": "sgd"}, TypeError, r"optimizers\[0\] is a str"),
        ({"callbacks": [object()]}, TypeError, r"callbacks\[0\] is a object"),
        ({"save_num_checkpoints_to_keep": 0}, ValueError, "save_num_checkpoints_to_keep=0"),
        ({"train_dataloader": "abc"}, TypeError, "train_dataloader='abc' is a str, not an iterable of batches"),
        ({"eval_dataloader": 5}, TypeError, "eval_dataloader=5 is a int, not an iterable of batches"),
    ],
)
def test_bad_input_fails_before_training(kwargs, error, pattern) -> None:
    model = mlp_classifier(4, 2)
    args = {
        "model": model,
        "train_dataloader": DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8),
        "max_duration": "1ep",
        "optimizers": torch.optim.SGD(model.parameters(), lr=0.1),
        "progress_bar": False,
    }
    args.update(kwargs)
    with pytest.raises(error, match=pattern):
        Trainer(**args)


def test_models_without_a_loss_and_bad_classifiers_are_refused() -> None:
    with pytest.raises(TypeError, match=r"wrap a classification module in cadence\.Classifier"):
        Trainer(model=_NoLoss(), max_duration="1ep")
    with pytest.raises(ValueError, match="num_classes=None"):
        Classifier(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"must be a torch\.nn\.Module"):
        Classifier("resnet", num_classes=3)  # type: ignore[arg-type]


def test_fit_without_data_or_optimizer_explains_what_is_missing() -> None:
    model = mlp_classifier(4, 2)
    with pytest.raises(ValueError, match="fit\\(\\) needs train_dataloader and max_duration"):
        Trainer(model=model, progress_bar=False).fit()
    loader = DataLoader(TensorDataset(torch.randn(4, 4), torch.zeros(4, dtype=torch.long)), batch_size=2)
    frozen = mlp_classifier(4, 2).requires_grad_(False)  # nothing to train: no default optimizer either
    with pytest.raises(ValueError, match="fit\\(\\) needs optimizers"):
        Trainer(model=frozen, train_dataloader=loader, max_duration="1ep", progress_bar=False).fit()
    with pytest.raises(ValueError, match="eval\\(\\) needs an eval_dataloader"):
        Trainer(model=model, progress_bar=False).eval()


def test_fp16_autocast_uses_a_grad_scaler_that_is_checkpointed(tmp_path) -> None:
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,)))
    model = mlp_classifier(8, 3)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=8),
        max_duration="1ep",
        precision="amp_fp16",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        save_folder=tmp_path,
        progress_bar=False,
        seed=0,
    )
    assert trainer.state.scaler is not None
    trainer.fit()
    payload = torch.load(tmp_path / "latest.pt", weights_only=True)
    assert payload["scaler"]["scale"] == trainer.state.scaler.get_scale()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_deterministic_mode_turns_on_deterministic_kernels() -> None:
    model = mlp_classifier(4, 2)
    try:
        Trainer(model=model, deterministic_mode=True, progress_bar=False)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_failing_fit_marks_every_logger_failed() -> None:
    from cadence import Algorithm, LoggerDestination

    class Recorder(LoggerDestination):
        statuses: list[str] = []

        def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
            self.statuses.append(f"{status}: {error}")

    class Explode(Algorithm):
        events = (Event.BATCH_END,)

        def match(self, event, state):
            return True

        def apply(self, event, state, logger):
            raise RuntimeError("boom")

    recorder = Recorder()
    model = mlp_classifier(4, 2)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=4),
        max_duration="1ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[Explode()],
        loggers=[recorder],
        progress_bar=False,
    )
    with pytest.raises(Exception, match="Explode failed on event 'batch_end'"):
        trainer.fit()
    assert recorder.statuses == ["FAILED: Explode failed on event 'batch_end': RuntimeError: boom"]


def test_an_optimizer_that_steps_with_a_closure_runs_the_batch_inside_it() -> None:
    class TwoPassSGD(torch.optim.SGD):
        """Re-evaluates the loss in its step, as SAM does."""

        uses_closure = True

        def step(self, closure=None):
            first = closure()
            self.zero_grad()
            second = closure()
            super().step()
            return (first + second) / 2

    class SamplesSeenByMetrics(Callback):
        def __init__(self) -> None:
            self.counted: list[int] = []

        def batch_end(self, state: State, logger: Logger) -> None:
            accuracy = state.train_metrics["MulticlassAccuracy"]
            self.counted.append(int((accuracy.tp + accuracy.fn).sum()))

    counter, seen = EventCounter(), SamplesSeenByMetrics()
    model = mlp_classifier(4, 2)
    data = TensorDataset(torch.randn(12, 4), torch.randint(0, 2, (12,)))
    logger = InMemoryLogger()
    Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        max_duration="2ba",
        optimizers=TwoPassSGD(model.parameters(), lr=0.1),
        callbacks=[counter, seen],
        loggers=[logger],
        progress_bar=False,
        seed=0,
        compute_train_metrics=True,
    ).fit()
    assert counter.counts[Event.BEFORE_FORWARD] == 4 and counter.counts[Event.AFTER_TRAIN_BATCH] == 4
    assert counter.counts[Event.BATCH_END] == 2
    assert seen.counted == [4, 8], "train metrics count each sample once per step, at the first pass's outputs"
    _, losses = logger.steps_and_values("loss/train/total")
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
