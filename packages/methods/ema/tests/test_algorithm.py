"""EMA adapter: arguments, when it updates, which weights evaluation, checkpoints and the fitted model hold,
exact resume from a checkpoint holding the average, the conflict with SWA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from cadence_ema import EMA
from torch.utils.data import DataLoader

from cadence import Algorithm, Callback, Effects, Event, MethodConflictError, Resource, State, Trainer
from cadence.engine import check_composition
from cadence.testing import assert_same_tensors, image_dataset, tiny_image_classifier


def _weights(state: State) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.model.state_dict().items()}


class Recorder(Callback):
    """The model's weights at some events (callbacks run after the methods)."""

    def __init__(self, *events: Event):
        self.events = events
        self.seen: list[tuple[Event, int, dict[str, torch.Tensor]]] = []

    def run_event(self, event: Event, state: State, logger: Any) -> None:
        if event in self.events:
            self.seen.append((event, state.timestamp.batch, _weights(state)))

    def at(self, event: Event) -> list[dict[str, torch.Tensor]]:
        return [weights for e, _, weights in self.seen if e is event]


def _trainer(ema: EMA, duration: str = "6ba", callbacks: tuple = (), **kwargs: Any) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(image_dataset(16), batch_size=4, shuffle=True),  # 4 batches per epoch
        max_duration=duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=[ema],
        callbacks=list(callbacks),
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def _expected_average(
    start: dict[str, torch.Tensor], sampled: list[dict[str, torch.Tensor]], smoothing: float
) -> dict[str, torch.Tensor]:
    """Composer's recursion over the sampled weights, from the weights when the average started."""
    average = {k: v.clone() for k, v in start.items()}
    for current in sampled:
        for name, value in average.items():
            if value.is_floating_point():
                average[name] = value * smoothing + (1.0 - smoothing) * current[name]
            else:
                average[name] = current[name].clone()
    return average


@pytest.mark.parametrize(
    ("kwargs", "start", "sampled"),
    [
        ({"half_life": "2ba"}, 1, [1, 2, 3, 4, 5, 6]),
        ({"half_life": "4ba", "update_interval": "2ba", "ema_start": "3ba"}, 3, [4, 6]),  # batch 3: not due
        ({"half_life": None, "smoothing": 0.8, "ema_start": "0.5dur"}, 3, [3, 4, 5, 6]),
    ],
)
def test_the_fitted_model_is_the_average_of_the_sampled_training_weights(
    kwargs: dict, start: int, sampled: list
) -> None:
    ema = EMA(**kwargs)
    recorder = Recorder(Event.BATCH_END)
    trainer = _trainer(ema, callbacks=(recorder,))
    trainer.fit()
    by_batch = {batch: weights for _, batch, weights in recorder.seen}  # the training weights after each step
    expected = _expected_average(by_batch[start], [by_batch[b] for b in sampled], ema._smoothing)
    assert ema.num_updates == len(sampled) and ema.ema_active
    assert_same_tensors(_weights(trainer.state), expected, "model after fit")
    assert_same_tensors(ema.state_dict()["held"], by_batch[6], "the training weights")


def test_epoch_interval_updates_on_epoch_end_only() -> None:
    ema = EMA(half_life="2ep")  # update_interval defaults to '1ep'
    _trainer(ema, duration="3ep").fit()
    assert ema.num_updates == 3 and ema._smoothing == 2 ** (-1 / 2)


@pytest.mark.parametrize("eval_with", ["ema", "raw"])
def test_evaluation_uses_the_average_and_training_resumes_on_the_training_weights(eval_with: str) -> None:
    recorder = Recorder(Event.BATCH_END, Event.EVAL_START, Event.EVAL_END)
    ema = EMA(half_life="1ba", eval_with=eval_with)
    trainer = _trainer(
        ema,
        duration="4ba",
        callbacks=(recorder,),
        eval_dataloader=DataLoader(image_dataset(4, seed=1), batch_size=2),
        eval_interval="2ba",
    )
    trainer.fit()
    training = recorder.at(Event.BATCH_END)
    for index, (start, end) in enumerate(zip(recorder.at(Event.EVAL_START), recorder.at(Event.EVAL_END))):
        assert_same_tensors(end, training[2 * index + 1], "after evaluation")  # the training weights are back
        assert torch.equal(start["module.head.weight"], end["module.head.weight"]) is (eval_with == "raw")


def test_checkpoints_hold_the_average_and_the_training_weights_in_the_methods_state(tmp_path: Path) -> None:
    recorder = Recorder(Event.BATCH_END, Event.BATCH_CHECKPOINT, Event.AFTER_DATALOADER)
    ema = EMA(half_life="2ba")
    _trainer(ema, duration="3ba", callbacks=(recorder,), save_folder=tmp_path, save_interval="1ba").fit()
    payload = torch.load(tmp_path / "ep0-ba2.pt", weights_only=True)
    ((name, saved),) = payload["algorithms"]
    assert name == "EMA" and saved["ema_active"] and saved["num_updates"] == 2
    training, checkpointed = recorder.at(Event.BATCH_END)[1], recorder.at(Event.BATCH_CHECKPOINT)[1]
    assert_same_tensors(payload["model"], checkpointed, "the checkpoint's model")
    assert_same_tensors(saved["held"], {k: v for k, v in training.items() if k in saved["held"]}, "held")
    assert not torch.equal(checkpointed["module.head.weight"], training["module.head.weight"])
    for before, after in zip(recorder.at(Event.BATCH_END), recorder.at(Event.AFTER_DATALOADER)[1:]):
        assert_same_tensors(after, before, "next batch's data stage")  # swapped back before any method sees it


def test_resume_from_a_checkpoint_holding_the_average_is_bitwise_the_uninterrupted_run(tmp_path: Path) -> None:
    plain = _trainer(EMA(half_life="3ba"), duration="7ba")  # never swaps for a checkpoint
    plain.fit()
    whole = _trainer(EMA(half_life="3ba"), duration="7ba", save_folder=tmp_path / "a", save_interval="2ba")
    whole.fit()
    resumed = _trainer(EMA(half_life="3ba"), duration="7ba", load_path=tmp_path / "a" / "ep0-ba2.pt")
    resumed.fit()  # the checkpoint's model is the average: training continues from the held training weights
    for other in (whole, resumed):
        assert_same_tensors(plain.state.model.state_dict(), other.state.model.state_dict(), "model (the average)")
        assert_same_tensors(plain.state.algorithms[0].state_dict(), other.state.algorithms[0].state_dict(), "EMA")
        assert_same_tensors(plain.state.optimizers[0].state_dict(), other.state.optimizers[0].state_dict(), "opt")


def test_eval_after_fit_keeps_the_average_in_the_model() -> None:
    trainer = _trainer(EMA(half_life="1ba"), duration="2ba", eval_dataloader=DataLoader(image_dataset(4), batch_size=2))
    trainer.fit()
    fitted = _weights(trainer.state)
    trainer.eval()
    assert_same_tensors(_weights(trainer.state), fitted, "model after eval()")


def test_matches_nothing_before_ema_start() -> None:
    ema, state = EMA(half_life="2ba", ema_start="0.5dur"), State(model=tiny_image_classifier(), max_duration="10ba")
    state.checkpoint_due = True
    assert [e for e in Event if ema.match(e, state)] == []


class SWA(Algorithm):
    """Stands in for cadence_swa.SWA (method packages never import each other)."""

    def match(self, event: Event, state: State) -> bool:
        return False

    def apply(self, event: Event, state: State, logger: Any) -> None:
        pass


def test_the_engine_refuses_ema_with_swa_giving_the_fix() -> None:
    with pytest.raises(MethodConflictError, match=r"EMA and SWA cannot be used together\. Fix: use one of them"):
        check_composition([EMA(), SWA()])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"smoothing": 0.9}, ValueError, r"exactly one of `half_life` and `smoothing`, got both"),
        ({"half_life": None}, ValueError, r"exactly one of `half_life` and `smoothing`, got neither"),
        ({"half_life": None, "smoothing": 1.0}, ValueError, "`smoothing`=1.0 must be a finite number in \\(0, 1\\)"),
        ({"half_life": None, "smoothing": 0}, ValueError, "`smoothing`"),
        ({"half_life": "10ep", "update_interval": "5ba"}, ValueError, r"same unit: write update_interval in ep"),
        ({"half_life": "1.5ep"}, ValueError, r"`half_life`='1.5ep' is not a time: .*only 'dur' may be fractional"),
        ({"half_life": "0ba"}, ValueError, "`half_life`='0ba' must be a positive amount of ba, ep"),
        ({"half_life": "0.5dur"}, ValueError, "`half_life`='0.5dur' must be"),
        ({"half_life": 1000}, TypeError, r"`half_life`=1000 is not a time: write a time string such as '10ba'"),
        ({"update_interval": "1sp"}, ValueError, "`update_interval`='1sp'"),
        ({"ema_start": "2dur"}, ValueError, r"`ema_start`='2dur' must be an amount of dur \(at most 1\)"),
        ({"eval_with": "both"}, ValueError, "`eval_with`='both' must be one of 'ema', 'raw'"),
    ],
)
def test_bad_arguments_are_refused_at_construction_naming_them(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        EMA(**kwargs)


def test_effects_repr_and_smoothing() -> None:
    ema = EMA(half_life="10ba", update_interval="5ba")
    assert ema._smoothing == 2**-0.5 and ema.ema_start == "0.0dur"
    assert (
        repr(ema) == "EMA(half_life='10ba', smoothing=None, ema_start='0.0dur', update_interval='5ba', eval_with='ema')"
    )
    effects = ema.effects()
    assert effects.reads == effects.writes == {Resource.WEIGHTS} and "SWA" in effects.conflicts
    assert isinstance(effects, Effects) and EMA(half_life=None, smoothing=0.9)._every.value == 1
