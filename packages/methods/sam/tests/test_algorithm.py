"""SAM in the trainer: wrapping, logging, precision, microbatches, resume, composition with AFTER_TRAIN_BATCH."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from cadence_sam import SAM, SAMOptimizer
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Event, InMemoryLogger, Resource, State, Trainer
from cadence import schedulers as cadence_schedulers
from cadence.testing import assert_same_tensors, image_dataset, mlp_classifier, tiny_image_classifier


def _mlp() -> torch.nn.Module:
    model = mlp_classifier(in_features=3 * 32 * 32, num_classes=4)
    model.module.insert(0, torch.nn.Flatten())
    return model


def _trainer(
    algorithms: list[Algorithm],
    duration: str = "4ba",
    lr: float = 0.05,
    make_model=tiny_image_classifier,
    **kwargs: Any,
) -> Trainer:
    torch.manual_seed(0)
    model = make_model()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4, shuffle=True),
        max_duration=duration,
        optimizers=kwargs.pop("optimizers", None) or torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
        algorithms=algorithms,
        seed=1,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _same_weights(a: Trainer, b: Trainer) -> None:
    assert_same_tensors(a.state.model.state_dict(), b.state.model.state_dict(), "model")


def test_declarations() -> None:
    algorithm = SAM()
    assert (algorithm.rho, algorithm.epsilon, algorithm.interval) == (0.05, 1e-12, 1)
    assert [e for e in Event if algorithm.match(e, State(model=tiny_image_classifier()))] == [Event.INIT]
    assert Resource.OPTIMIZER in algorithm.effects().exclusive
    assert repr(SAM(rho=0.5, interval=10)) == "SAM(rho=0.5, epsilon=1e-12, interval=10)"
    with pytest.raises(ValueError, match="`rho`=-1"):
        SAM(rho=-1)


def test_wraps_the_optimizer_and_the_schedule_drives_the_base() -> None:
    trainer = _trainer([SAM()], schedulers=cadence_schedulers.LinearScheduler(alpha_f=0.5, t_max="4ba"))
    sam = trainer.state.optimizers[0]
    assert isinstance(sam, SAMOptimizer) and sam.uses_closure and isinstance(sam.base_optimizer, torch.optim.SGD)
    trainer.fit()
    assert sam.base_optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5) and sam.global_step == 4


def test_logs_the_first_evaluations_loss_once_per_step() -> None:
    plain_log, sam_log = InMemoryLogger(), InMemoryLogger()
    _trainer([], loggers=[plain_log]).fit()
    _trainer([SAM(rho=0.5)], loggers=[sam_log]).fit()
    _, plain = plain_log.steps_and_values("loss/train/total")
    steps, losses = sam_log.steps_and_values("loss/train/total")
    assert steps == [1, 2, 3, 4] and losses[0] == plain[0]  # the same weights and batch: the loss at w
    assert losses[1] != plain[1]  # SAM moved the weights differently


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16", "amp_fp16"])
def test_rho_zero_trains_exactly_like_the_base_optimizer(precision: str) -> None:
    plain, sam = _trainer([], precision=precision), _trainer([SAM(rho=0.0)], precision=precision)
    assert (sam.state.scaler is not None) == (precision == "amp_fp16")
    plain.fit()
    sam.fit()
    _same_weights(plain, sam)


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
def test_trains_under_autocast(precision: str) -> None:
    logger = InMemoryLogger()
    trainer = _trainer([SAM(rho=0.5)], precision=precision, loggers=[logger])
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    _, losses = logger.steps_and_values("loss/train/total")
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))


def test_fp16_overflow_skips_steps_until_the_scale_backs_off() -> None:
    trainer = _trainer([SAM(rho=0.5)], precision="amp_fp16", duration="3ba")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # the backward overflows in fp16 at this scale
    trainer.state.scaler = trainer.state.optimizers[0].grad_scaler = scaler
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    assert scaler.get_scale() < 2.0**38  # backed off once per overflowing evaluation
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))  # no step taken


def test_microbatches_give_the_whole_batch_result() -> None:  # no BatchNorm: its statistics are per microbatch
    whole = _trainer([SAM(rho=0.5)], make_model=_mlp)
    split = _trainer([SAM(rho=0.5)], make_model=_mlp, device_train_microbatch_size=2)
    whole.fit()
    split.fit()
    for a, b in zip(whole.state.model.parameters(), split.state.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stop", [1, 2, 3])
def test_resumes_exactly_before_on_and_after_a_sam_step(tmp_path: Path, stop: int) -> None:
    whole = _trainer([SAM(rho=0.5, interval=2)], duration="5ba", save_folder=tmp_path / "a", save_interval="1ba")
    whole.fit()
    resumed = _trainer([SAM(rho=0.5, interval=2)], duration="5ba", load_path=tmp_path / "a" / f"ep0-ba{stop}.pt")
    assert resumed.state.optimizers[0].global_step == stop
    resumed.fit()
    _same_weights(whole, resumed)
    assert_same_tensors(whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "opt")


def test_a_run_without_sam_continues_with_sam_from_its_base_optimizers_state(tmp_path: Path) -> None:
    from cadence import CheckpointMismatchError

    plain = _trainer([], duration="2ba", save_folder=tmp_path / "plain", save_interval="2ba")
    plain.fit()
    continued = _trainer(
        [SAM(rho=0.5)], duration="4ba", load_path=tmp_path / "plain" / "ep0-ba2.pt", save_folder=tmp_path / "sam"
    )
    base = continued.state.optimizers[0].base_optimizer
    assert_same_tensors(plain.state.optimizers[0].state_dict(), base.state_dict(), "the momentum carries over")
    continued.fit()
    with pytest.raises(CheckpointMismatchError, match="is SAMOptimizer and this run's is SGD"):
        _trainer([], duration="4ba", load_path=tmp_path / "sam" / "ep1-ba4.pt")  # never the other way round


class _DecayAfterTrainBatch(Algorithm):
    """Stands in for a method that changes the weights on AFTER_TRAIN_BATCH (decoupled weight decay)."""

    events = (Event.AFTER_TRAIN_BATCH,)

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_TRAIN_BATCH

    def apply(self, event: Event, state: State, logger: Any) -> None:
        with torch.no_grad():
            for param in state.model.parameters():
                param.mul_(0.5)


def test_weight_changes_after_the_first_evaluation_count_once_per_step() -> None:
    trainer = _trainer([SAM(rho=0.5), _DecayAfterTrainBatch()], duration="3ba", lr=0.0)
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()  # lr 0: only the stand-in changes the weights; SAM restores the first evaluation's weights
    for a, b in zip(before, trainer.state.model.parameters()):
        assert torch.equal(a * 0.5 * 0.5 * 0.5, b)


def test_one_unwrapped_optimizer_only() -> None:
    torch.manual_seed(0)
    model = tiny_image_classifier()
    head, body = list(model.module.head.parameters()), list(model.module.features.parameters())
    two = [torch.optim.SGD(head, lr=0.1), torch.optim.SGD(body, lr=0.1)]
    with pytest.raises(Exception, match="wraps one optimizer"):
        _trainer([SAM()], optimizers=two)
    wrapped = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(Exception, match="not already wrapped"):
        _trainer([SAM()], optimizers=wrapped)


def test_a_nan_loss_stops_the_run_naming_the_step() -> None:
    images, labels = image_dataset(16).tensors
    images[5, 0, 0, 0] = float("nan")  # in the second batch
    torch.manual_seed(0)
    model = tiny_image_classifier()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(TensorDataset(images, labels), batch_size=4),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.05),
        algorithms=[SAM()],
        device="cpu",
        progress_bar=False,
    )
    with pytest.raises(Exception, match=r"loss is nan at step 2"):
        trainer.fit()
