"""`cadence.ops.checks.check_time`: the time arguments of methods (EMA's half_life, SWA's window, ...)."""

from __future__ import annotations

import pytest

from cadence import Time, TimeUnit
from cadence.ops import ArgumentTypeError, check_time

BA_EP = (TimeUnit.BATCH, TimeUnit.EPOCH)
WINDOW = (TimeUnit.DURATION, *BA_EP)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("500ba", Time(500, TimeUnit.BATCH)),
        ("0.25dur", Time(0.25, TimeUnit.DURATION)),
        (0.5, Time(0.5, TimeUnit.DURATION)),
        (Time(3, TimeUnit.EPOCH), Time(3, TimeUnit.EPOCH)),
        ("0ep", Time(0, TimeUnit.EPOCH)),
        (1.0, Time(1.0, TimeUnit.DURATION)),
    ],
)
def test_times_in_allowed_units_are_returned_as_time(value, expected) -> None:
    assert check_time("swa_start", value, WINDOW) == expected


@pytest.mark.parametrize("value", [3, True, None, [1], b"1ep"])
def test_values_that_are_not_times_are_type_errors_naming_the_argument(value) -> None:
    expected = r"`half_life`=.* is not a time: write a time string such as '10ba', a Time, or a float fraction"
    with pytest.raises(ArgumentTypeError, match=expected):
        check_time("half_life", value, BA_EP)


@pytest.mark.parametrize(
    ("value", "units", "positive", "pattern"),
    [
        ("10sp", BA_EP, False, r"`x`='10sp' must be an amount of ba, ep; e\.g\. '10ba'"),
        ("1.5dur", WINDOW, False, r"must be an amount of dur \(at most 1\), ba, ep; e\.g\. '0\.1dur'"),
        (1.5, WINDOW, False, r"`x`=1\.5 must be an amount of dur \(at most 1\)"),
        ("0ba", BA_EP, True, r"`x`='0ba' must be a positive amount of ba, ep"),
        ("-2ba", BA_EP, False, r"`x`='-2ba' (must be|is not a time)"),
        ("ten batches", BA_EP, False, r"`x`='ten batches' is not a time: "),
    ],
)
def test_times_outside_the_allowed_units_or_range_are_value_errors(value, units, positive, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        check_time("x", value, units, positive=positive)
