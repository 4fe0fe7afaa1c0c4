"""The interval family and the multiplicity corrections, on numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from cadence_harness.stats import (
    benjamini_hochberg,
    holm,
    paired_log_interval,
    paired_t_difference,
    paired_t_p_value,
    paired_t_ratio,
    t_bounds,
    t_interval,
    t_p_values,
)


def test_intervals() -> None:
    single = t_interval([0.5])
    assert single.low is None and single.format(scale=100) == "50.00"
    interval = t_interval([1.0, 2.0, 3.0])
    assert interval.mean == 2.0 and interval.format() == "2.00 ± 2.48"
    assert paired_t_difference([2.0, 3.0], [1.0, 1.0]).mean == 1.5
    assert t_interval([]).format() == "n/a"


def test_the_paired_p_value_is_the_two_sided_t_test_of_the_differences() -> None:
    # differences 1, 2, 3: mean 2, s 1, t = 2 / (1 / sqrt 3) = 3.4641 on 2 dof; two-sided p = 0.0742
    assert paired_t_p_value([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx(0.07418, abs=1e-5)
    # the p-value and the 95% interval agree: the interval excludes 0 exactly when p < 0.05
    arm, base = [0.83, 0.84, 0.86, 0.85], [0.80, 0.82, 0.81, 0.82]
    interval, p = paired_t_difference(arm, base), paired_t_p_value(arm, base)
    assert (interval.low is not None and interval.low > 0) == (p is not None and p < 0.05)
    assert paired_t_p_value([1.0, 2.0], [0.5, 1.5]) == 0.0  # the same difference on every seed: no noise
    assert paired_t_p_value([1.0, 2.0], [1.0, 2.0]) == 1.0 and paired_t_p_value([1.0], [0.0]) is None


def test_a_ratio_is_the_geometric_mean_of_the_paired_ratios_with_a_t_interval_on_their_logs() -> None:
    same = paired_t_ratio([10.0, 12.0, 11.0], [5.0, 6.0, 5.5])
    assert same.mean == pytest.approx(2.0) and same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    ratio = paired_t_ratio([2.0, 4.0, 8.0], [1.0, 1.0, 1.0])  # ratios 2, 4, 8: logs log 2 * (1, 2, 3)
    half = 4.302652729911275 * math.log(2) / math.sqrt(3)  # t(0.975, 2) · s / √n with s = log 2
    assert ratio.mean == pytest.approx(4.0) and ratio.n == 3
    assert ratio.low == pytest.approx(4.0 / math.exp(half)) and ratio.high == pytest.approx(4.0 * math.exp(half))
    with pytest.raises(ValueError, match="equal lengths"):
        paired_t_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive values"):
        paired_t_ratio([0.0, 1.0], [1.0, 1.0])


def test_bounds_leave_a_side_open_where_a_seed_is_only_bounded() -> None:
    assert t_bounds([0.0, 0.0], [0.0, math.inf]) == (0.0, math.inf)
    low, high = t_bounds([-math.inf, 0.1], [0.2, 0.1])
    assert low == -math.inf and high == pytest.approx(t_interval([0.2, 0.1]).high)
    low, high, p_up, p_down = paired_log_interval([(0.5, 0.5), (0.7, 0.7), (0.6, 0.6)])
    assert low > 1 and p_up < 0.025 < p_down  # exp(0.6 ± 0.25)
    assert t_p_values([1.0, 1.0], [1.0, 1.0]) == (0.0, 1.0)  # no spread: the sign decides


def test_holm_and_benjamini_hochberg_match_their_definitions() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone: 0.02, 0.03, 0.06, 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted p * 4 / rank: 0.02, 0.02, 0.04, 0.04 (monotone from the top)
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([]) == [] and benjamini_hochberg([0.5]) == [0.5]
