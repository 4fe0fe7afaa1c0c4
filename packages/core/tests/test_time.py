import pytest

from cadence import Time, Timestamp, TimeUnit


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("10ep", 10, TimeUnit.EPOCH),
        ("100ba", 100, TimeUnit.BATCH),
        ("3e4sp", 30000, TimeUnit.SAMPLE),
        ("1e6tok", 1_000_000, TimeUnit.TOKEN),
        ("0.5dur", 0.5, TimeUnit.DURATION),
        (" 2 EP ", 2, TimeUnit.EPOCH),
    ],
)
def test_parses_time_strings(text: str, value: float, unit: TimeUnit) -> None:
    time = Time.from_timestring(text)
    assert time.value == value and time.unit is unit
    assert isinstance(time.value, float if unit is TimeUnit.DURATION else int)


@pytest.mark.parametrize("text", ["1.5ep", "2.5ba", "0.1sp"])
def test_rejects_fractional_counts(text: str) -> None:
    with pytest.raises(ValueError, match="only 'dur' may be fractional"):
        Time.from_timestring(text)


@pytest.mark.parametrize("text", ["", "ep", "10", "ten ep", "10 epochs please", "10xx", "1e3e2ba", "-1ep"])
def test_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        Time.from_timestring(text)


def test_unit_aliases_and_from_input() -> None:
    assert Time(10, "epoch") == Time(10, "ep") == Time.from_input("10ep") == Time.from_input(10)
    assert Time.from_input(5, "ba") == Time(5, TimeUnit.BATCH)
    with pytest.raises(ValueError, match="unknown time unit"):
        Time(1, "fortnight")
    with pytest.raises(TypeError):
        Time.from_input(1.5)
    with pytest.raises(ValueError, match=">= 0"):
        Time(-1, "ba")


def test_arithmetic_and_comparison() -> None:
    assert Time(3, "ba") + Time(4, "ba") == Time(7, "ba")
    assert Time(7, "ba") - 2 == Time(5, "ba")
    assert Time(10, "ep") * 0.5 == Time(5, "ep")
    assert Time(0.5, "dur") * 0.5 == Time(0.25, "dur")
    assert Time(10, "ep") * 0.25 == Time(2, "ep")  # rounded to a whole count
    assert Time(6, "ba") / Time(3, "ba") == 2.0
    assert Time(3, "ba") < Time(4, "ba") and Time(3, "ba") <= 3 and Time(4, "ba") < "5ba"  # type: ignore[operator]
    with pytest.raises(ValueError, match="units differ"):
        Time(1, "ep") + Time(1, "ba")
    with pytest.raises(ValueError, match="units differ"):
        _ = Time(1, "ep") < Time(1, "ba")
    assert hash(Time(1, "ep")) == hash(Time(1, "epoch"))
    assert str(Time(3, "ba")) == "3ba" and repr(Time(3, "ba")) == "Time(3, TimeUnit.BATCH)"


def test_time_is_immutable() -> None:
    time = Time(1, "ep")
    with pytest.raises(AttributeError):
        time.value = 2  # type: ignore[misc]


def test_timestamp_advances_and_round_trips() -> None:
    ts = Timestamp().to_next_batch(32, tokens=320, duration=0.5).to_next_batch(16, duration=0.25)
    assert (ts.batch, ts.sample, ts.token, ts.batch_in_epoch, ts.sample_in_epoch) == (2, 48, 320, 2, 48)
    assert ts.total_wct == pytest.approx(0.75) and ts.batch_wct == pytest.approx(0.25)
    ts = ts.to_next_epoch()
    assert (ts.epoch, ts.batch, ts.batch_in_epoch, ts.sample_in_epoch) == (1, 2, 0, 0)
    assert ts.get("ep") == 1 and ts.get(TimeUnit.SAMPLE) == 48
    assert Timestamp.from_state_dict(ts.state_dict()) == ts
    with pytest.raises(ValueError, match="unknown Timestamp fields"):
        Timestamp.from_state_dict({"epochs": 1})
