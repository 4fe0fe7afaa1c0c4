"""Composer's documented behaviour of Time, Timestamp and State, which Composer code relies on."""

import datetime
import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from cadence import Event, State, Time, Timestamp, TimeUnit
from cadence.testing import mlp_classifier
from cadence.time import NotATimeError, NotAWholeCountError, TimeUnitMismatchError


# Time ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("2iter", 2, TimeUnit.ITERATION),
        ("6sec", 6, TimeUnit.SECOND),
        ("4_000tok", 4000, TimeUnit.TOKEN),
        ("3_0e10sp", 300_000_000_000, TimeUnit.SAMPLE),
        ("1h30m", 5400, TimeUnit.SECOND),
        ("45s", 45, TimeUnit.SECOND),
        ("2h", 7200, TimeUnit.SECOND),
        ("1dur", 1.0, TimeUnit.DURATION),
    ],
)
def test_composer_time_strings(text: str, value: float, unit: TimeUnit) -> None:
    time = Time.from_timestring(text)
    assert (time.value, time.unit) == (value, unit)
    assert TimeUnit("iter") is TimeUnit.ITERATION and TimeUnit("sec") is TimeUnit.SECOND


def test_huge_integer_strings_are_read_exactly() -> None:
    assert Time.from_timestring("9_007_199_254_740_993tok").value == 9_007_199_254_740_993  # not a float's 2**53


@pytest.mark.parametrize("text", ["4__000tok", "_4tok", "1h30x"])
def test_bad_underscores_and_clock_strings_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Time.from_timestring(text)


def test_to_timestring_round_trips() -> None:
    for time in (Time(5, "ep"), Time(0.25, "dur"), Time(3, "iter"), Time(7, "sec")):
        assert Time.from_timestring(time.to_timestring()) == time
    assert Time(5, TimeUnit.EPOCH).to_timestring() == "5ep"


def test_arithmetic_results_may_be_negative() -> None:
    negative = Time(1, "ep") - Time(2, "ep")
    assert negative.value == -1 and negative.unit is TimeUnit.EPOCH and str(negative) == "-1ep"
    assert -Time(3, "ba") == 0 - Time(3, "ba") and (-Time(3, "ba")).value == -3
    assert 10 - Time(4, "ba") == Time(6, "ba") and 2 + Time(1, "ba") == Time(3, "ba")
    assert pickle.loads(pickle.dumps(negative)).value == -1
    with pytest.raises(ValueError, match=">= 0"):  # a user's value still may not be negative
        Time(-1, "ep")
    with pytest.raises(ValueError, match=">= 0"):
        Time.from_timestring("-1ep")


def test_composer_multiplication_division_and_remainder() -> None:
    assert Time(2, "ep") * Time(0.5, "dur") == Time(1, "ep") == Time(0.5, "dur") * Time(2, "ep")
    assert Time(4, "ep") / Time(2, "ep") == Time(2.0, "dur")
    assert (Time(4, "ep") / Time(2, "ep")).unit is TimeUnit.DURATION
    assert Time(4, "ep") / 2 == Time(2, "ep")
    assert Time(7, "ba") % Time(3, "ba") == Time(1, "ba")
    assert int(Time(3, "ba")) == 3 and float(Time(0.5, "dur")) == 0.5


@pytest.mark.parametrize(
    "mixing",
    [
        lambda: Time(1, "ep") + Time(1, "ba"),
        lambda: Time(1, "ep") - Time(1, "ba"),
        lambda: Time(1, "ep") < Time(1, "ba"),
        lambda: Time(1, "ep") >= "1ba",
        lambda: Time(1, "ep") / Time(1, "ba"),
        lambda: Time(1, "ep") % Time(1, "ba"),
        lambda: Time(1, "ep") * Time(1, "ba"),
    ],
)
def test_mixing_units_raises_what_composer_and_cadence_code_catch(mixing) -> None:
    with pytest.raises(RuntimeError, match=r"units differ|must be in 'dur'"):
        mixing()
    with pytest.raises(ValueError):
        mixing()
    with pytest.raises(TimeUnitMismatchError):
        mixing()


def test_fractional_counts_raise_composer_typeerror_and_cadence_valueerror() -> None:
    for catch in (TypeError, ValueError, NotAWholeCountError):
        with pytest.raises(catch, match="only 'dur' may be fractional"):
            Time.from_timestring("1.5ep")
        with pytest.raises(catch):
            Time(1.5, "ba")


def test_composers_named_constructors() -> None:
    made = [Time.from_iteration(2), Time.from_epoch(3), Time.from_batch(4), Time.from_sample(5), Time.from_token(6)]
    assert made == [Time(2, "iter"), Time(3, "ep"), Time(4, "ba"), Time(5, "sp"), Time(6, "tok")]
    assert Time.from_duration(0.25) == Time(0.25, "dur") and Time.from_second(7) == Time(7, "sec")
    assert Time.from_timedelta("1h20m40s") == Time(4840, "sec") and Time.from_timedelta("45s") == Time(45, "sec")
    with pytest.raises(ValueError, match="wall-clock string"):
        Time.from_timedelta("3ep")


def test_repr_is_composers_and_reads_back() -> None:
    for time in (Time(1, "tok"), Time(0.5, "dur"), Time(3, TimeUnit.ITERATION)):
        assert eval(repr(time), {"Time": Time, "TimeUnit": TimeUnit}) == time
    assert repr(Time(1, "tok")) == "Time(1, TimeUnit.TOKEN)"
    assert eval(repr(Timestamp(epoch=2, batch=5)), {"Timestamp": Timestamp}) == Timestamp(epoch=2, batch=5)


def test_from_input_refuses_what_is_not_a_time_with_composers_runtimeerror() -> None:
    for bad in (None, [123], {"ep": 1}, True):
        for catch in (RuntimeError, TypeError, NotATimeError):
            with pytest.raises(catch, match="expected a Time, a string like '10ep' or a number"):
                Time.from_input(bad)  # type: ignore[arg-type]
    assert Time.from_input(0.5, "dur") == Time(0.5, "dur") and Time.from_input(2.0, "ba") == Time(2, "ba")
    assert Time.from_input(3) == Time(3, "ep")  # cadence: a bare number is epochs (Composer: RuntimeError)


def test_units_and_events_are_found_by_name_in_any_case() -> None:
    assert Event("INIT") is Event.INIT and Event("Batch_End") is Event.BATCH_END and Event("fit_end") is Event.FIT_END
    assert TimeUnit("EPOCH") is TimeUnit.EPOCH and TimeUnit("Ba") is TimeUnit.BATCH and TimeUnit("tokens")
    with pytest.raises(ValueError, match="is not a valid Event"):
        Event("batch")


# Timestamp -------------------------------------------------------------------------------------
def test_wall_clock_fields_equal_composers_timedeltas() -> None:
    ts = Timestamp().to_next_batch(10, 20, datetime.timedelta(seconds=5))
    for field in (ts.total_wct, ts.epoch_wct, ts.batch_wct, ts.iteration_wct):
        assert field == datetime.timedelta(seconds=5) and datetime.timedelta(seconds=5) == field
        assert field != datetime.timedelta(seconds=4) and field < datetime.timedelta(seconds=6)
        assert field == 5.0 and hash(field) == hash(5.0)  # still the float cadence logs and checkpoints
    ts = ts.to_next_epoch(duration=datetime.timedelta(seconds=5))
    assert ts.total_wct == datetime.timedelta(seconds=10)
    assert ts.epoch_wct == ts.batch_wct == datetime.timedelta(0)  # both restart with the epoch, as in Composer


def test_timestamp_fields_are_read_only_except_composers_epoch_in_iteration() -> None:
    ts = Timestamp(epoch_in_iteration=1)
    ts.epoch_in_iteration = 2  # Composer's one setter
    assert ts.epoch_in_iteration == 2 and ts.epoch_in_iteration.unit is TimeUnit.EPOCH
    with pytest.raises(ValueError, match="counts ep"):
        ts.epoch_in_iteration = Time(1, "ba")
    with pytest.raises(FrozenInstanceError, match=r"Timestamp.batch.*timestamp.copy\(batch=...\)"):
        ts.batch = 3
    with pytest.raises(AttributeError):
        ts.total_wct = 1.0
    assert ts.copy(batch=3).batch == 3 and ts.batch == 0  # the supported way to set a field


def test_timestamp_fields_compare_with_time_and_read_like_composer_times() -> None:
    ts = Timestamp(epoch=1, batch=12, sample=48)
    assert ts.batch >= Time(10, "ba") and ts.batch == Time(12, "ba") and not ts.batch < Time(12, "ba")
    assert ts.batch.value == 12 and ts.batch.unit is TimeUnit.BATCH and ts.batch.to_timestring() == "12ba"
    assert ts.epoch == Time(1, "ep") and ts.get("sp") == Time(48, "sp")
    assert ts.batch + 1 == 13 and ts.batch % 4 == 0 and f"ba{ts.batch}" == "ba12"  # still an int
    assert ts.batch + Time(1, "ba") == Time(13, "ba")
    with pytest.raises(RuntimeError, match="units differ"):
        _ = ts.batch < Time(1, "ep")
    assert ts >= "10ba" and ts < Time(2, "ep") and ts == Time(48, "sp")  # Composer's Timestamp comparisons


def test_timestamp_iteration_fields() -> None:
    ts = Timestamp().to_next_batch(4, tokens=10, duration=1.0).to_next_epoch()
    assert (ts.iteration, ts.epoch_in_iteration, ts.token_in_iteration) == (0, 1, 10)
    assert ts.iteration_wct == ts.total_wct == 1.0
    ts = ts.to_next_iteration(duration=0.5)
    assert (ts.iteration, ts.epoch, ts.epoch_in_iteration, ts.token_in_iteration) == (1, 1, 0, 0)
    assert ts.total_wct == 1.5 and ts.iteration_wct == 0.0 and ts.get("iter") == Time(1, "iter")
    ts = ts.to_next_batch(2, duration=2.0)
    assert ts.iteration_wct == 2.0 and ts.get(TimeUnit.SECOND) == Time(3, "sec")


def test_timestamp_copy() -> None:
    ts = Timestamp(epoch=2, batch=7)
    changed = ts.copy(batch=9, batch_in_epoch=Time(1, "ba"), epoch=None)
    assert (changed.epoch, changed.batch, changed.batch_in_epoch) == (2, 9, 1) and ts.batch == 7
    assert ts.copy() == ts
    with pytest.raises(ValueError, match="unknown Timestamp fields"):
        ts.copy(batches=3)
    with pytest.raises(ValueError, match="counts ba"):
        ts.copy(batch=Time(1, "ep"))


def test_to_next_batch_takes_a_timedelta() -> None:
    ts = Timestamp().to_next_batch(8, 16, datetime.timedelta(milliseconds=250))
    ts = ts.to_next_batch(samples=8, duration=datetime.timedelta(seconds=1))
    assert ts.total_wct == pytest.approx(1.25) and ts.batch_wct == pytest.approx(1.0)
    assert ts.total_wct.total_seconds() == pytest.approx(1.25)  # Composer's timedelta reading works
    assert ts.sample == 16 and ts.token == 16


def test_old_and_composer_timestamp_dicts_load() -> None:
    old = {  # a checkpoint written before the iteration fields existed
        "epoch": 1, "batch": 5, "sample": 20, "token": 0, "batch_in_epoch": 1, "sample_in_epoch": 4,
        "token_in_epoch": 0, "total_wct": 3.0, "epoch_wct": 0.5, "batch_wct": 0.1,
    }  # fmt: skip
    ts = Timestamp.from_state_dict(old)
    assert (ts.epoch, ts.batch, ts.iteration, ts.epoch_in_iteration, ts.iteration_wct) == (1, 5, 0, 0, 3.0)
    assert Timestamp.from_state_dict(ts.state_dict()) == ts
    assert all(type(value) in (int, float) for value in ts.state_dict().values())  # checkpoints hold no cadence types
    composer = {**old, "iteration": 0, "epoch_in_iteration": 1, "token_in_iteration": 0}
    composer.update({k: datetime.timedelta(seconds=v) for k, v in [("total_wct", 3.0), ("iteration_wct", 3.0)]})
    assert Timestamp.from_state_dict(composer).iteration_wct == 3.0
    loaded = Timestamp(epoch=9, iteration=2)
    loaded.load_state_dict(old)  # Composer's in-place load; fields missing from the dict keep their values
    assert (loaded.epoch, loaded.batch, loaded.iteration) == (1, 5, 2)
    with pytest.raises(ValueError, match="unknown Timestamp fields"):
        loaded.load_state_dict({"epochs": 1})


# State -----------------------------------------------------------------------------------------
def _state(**kwargs) -> State:
    return State(model=mlp_classifier(2, 2), **kwargs)


@pytest.mark.parametrize(
    ("given", "expected"), [("10ep", Time(10, "ep")), (3, Time(3, "ep")), (Time(50, "ba"), Time(50, "ba"))]
)
def test_assigning_max_duration_converts_it(given, expected) -> None:
    state = _state()
    state.max_duration = given
    assert state.max_duration == expected and isinstance(state.max_duration, Time)
    state.max_duration = None
    assert state.max_duration is None


@pytest.mark.parametrize(("bad", "says"), [("0.5dur", "'dur' is relative"), ("2iter", "use ep, ba, sp or tok")])
def test_max_duration_refuses_units_the_trainer_cannot_end_on(bad: str, says: str) -> None:
    state = _state()
    with pytest.raises(ValueError, match=says):
        state.max_duration = bad
    with pytest.raises(ValueError, match=says):
        _state(max_duration=bad)


def test_set_dataloader() -> None:
    train, other = DataLoader(range(12), batch_size=4), DataLoader(range(10), batch_size=5)
    state = _state(dataloader=train)
    assert state.dataloader_label == "train" and state.train_dataloader is train
    assert state.dataloader_len == 3 and state.dataloader_len == Time(3, "ba")
    state.set_dataloader(other, "eval")
    assert (state.dataloader, state.dataloader_label, state.dataloader_len) == (other, "eval", 2)
    assert state.train_dataloader is train
    state.set_dataloader(other, "eval", dataloader_len=1)
    assert state.dataloader_len == 1
    state.set_dataloader(other, "eval", dataloader_len=Time(1, "ba"))
    assert state.dataloader_len.value == 1
    with pytest.warns(UserWarning, match="more than the loader's 2 batches"):
        state.set_dataloader(other, "eval", dataloader_len=5)
    assert state.dataloader_len == 2
    state.set_dataloader(iter(range(3)), "stream")
    assert state.dataloader_len is None
    state.set_dataloader()
    assert (state.dataloader, state.dataloader_label, state.dataloader_len) == (None, None, None)
    with pytest.raises(ValueError, match="name the loader"):
        state.set_dataloader(train)
    with pytest.raises(ValueError, match=r"must be an amount of ba"):
        state.set_dataloader(train, "train", dataloader_len=Time(1, "ep"))


def test_elapsed_duration_is_batch_grained_and_offers_composers_count() -> None:
    state = _state(max_duration="2ep", dataloader_len=10)
    state.timestamp = Timestamp(epoch=1, batch=15, batch_in_epoch=5)
    assert state.get_elapsed_duration() == Time(0.75, "dur")  # cadence: 15 of 20 batches
    assert state.get_elapsed_duration(whole_units=True) == Time(0.5, "dur")  # Composer: 1 of 2 epochs
    state.max_duration = "20ba"
    assert state.get_elapsed_duration() == state.get_elapsed_duration(whole_units=True) == Time(0.75, "dur")


def test_timestamp_fields_saved_with_torch_save_load_with_weights_only(tmp_path: Path) -> None:
    import torch

    stamp = Timestamp(batch=7, epoch=2, total_wct=1.5)
    torch.save({"batch": stamp.batch, "wct": stamp.total_wct}, tmp_path / "fields.pt")
    loaded = torch.load(tmp_path / "fields.pt", weights_only=True)
    assert loaded == {"batch": 7, "wct": 1.5} and loaded["batch"].unit == TimeUnit.BATCH
