"""The interval family and the multiplicity corrections, on numbers worked out by hand."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats as scipy_stats

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
    assert t_bounds([0.0, 0.0], [0.0, math.inf])[1] == math.inf
    assert t_bounds([-math.inf, 0.1, 0.1], [0.2, 0.1, 0.1])[0] == -math.inf
    low, _, p_up, p_down = paired_log_interval([(0.5, 0.5), (0.7, 0.7), (0.6, 0.6)])
    assert low > 1 and p_up < 0.025 < p_down  # exp(0.6 ± 0.25)
    assert t_p_values([1.0, 1.0], [1.0, 1.0]) == (0.0, 1.0)  # known values, no spread: the sign decides


def test_a_side_that_rests_on_bounds_is_no_surer_than_the_sign_test() -> None:
    # Five seeds, each less accurate than the baseline's shortest budget for 0.15 % more FLOPs: each speedup is
    # known only as below 0.9985, and FLOPs are deterministic, so the five bounds are equal. A t-test on them read
    # p = 0 and an interval ending at the bound; the data say no more than "five of five seeds below 1".
    bound = math.log(1 / 1.0015)
    low, high, p_up, p_down = paired_log_interval([(-math.inf, bound)] * 5)
    assert p_down == pytest.approx(1 / 32) and p_up == 1.0
    assert low == 0.0 and high == math.inf  # the sign test bounds no median with five seeds at 95 %
    # Seven seeds: the sign test ends the interval at the highest bound; a wider t end from spread-out bounds stays.
    low, high, _, p_down = paired_log_interval([(-math.inf, bound)] * 7)
    assert high == pytest.approx(math.exp(bound)) and p_down == pytest.approx(1 / 128)
    spread = [(-math.inf, bound * k) for k in (1, 2, 3, 4, 5, 6, 7)]
    assert t_bounds([b[0] for b in spread], [b[1] for b in spread])[1] == pytest.approx(
        max(t_interval([b[1] for b in spread]).high, bound)  # type: ignore[type-var]
    )
    # One seed known exactly, two beyond the range above: the low side rests on bounds, with 3 seeds it stays open.
    low, high, p_up, _ = paired_log_interval([(0.4, 0.4), (0.5, math.inf), (0.6, math.inf)])
    assert low == 0.0 and high == math.inf and p_up == pytest.approx(1 / 8)


def test_seeds_all_beyond_the_top_bound_the_speedup_once_their_accuracy_margins_show_it() -> None:
    # Three seeds more accurate than the baseline's best at half its top cost: the speedup is at least 2x for the
    # mean once the arm's mean accuracy is shown above the baseline's best (a paired t-test on the margins).
    above = [(math.log(2.0), math.inf)] * 3
    low, high, p_up, p_down = paired_log_interval(above, margins=[0.03, 0.04, 0.05])
    assert low == pytest.approx(2.0) and high == math.inf and p_down == 1.0
    assert p_up == pytest.approx(_one_sided_t([0.03, 0.04, 0.05]))
    low, _, p_up, _ = paired_log_interval(above, margins=[0.001, 0.05, 0.002])  # above the best by luck, perhaps
    assert low == 0.0 and p_up > 0.025
    below = [(-math.inf, math.log(0.9))] * 3  # less accurate than the baseline's shortest budget for 1/0.9 its cost
    low, high, p_up, p_down = paired_log_interval(below, margins=[-0.03, -0.04, -0.05])
    assert low == 0.0 and high == pytest.approx(0.9) and p_up == 1.0 and p_down < 0.025
    assert t_p_values([b[0] for b in below], [b[1] for b in below], null=math.log(0.95), margins=[-0.03] * 3)[1] == 0.0
    assert paired_log_interval(below)[1] == math.inf  # without margins: the sign test, which bounds nothing at n=3


def _one_sided_t(values: list[float]) -> float:
    mean, sd = statistics.mean(values), statistics.stdev(values)
    return float(scipy_stats.t.sf(mean / (sd / math.sqrt(len(values))), len(values) - 1))


def test_holm_and_benjamini_hochberg_match_their_definitions() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone: 0.02, 0.03, 0.06, 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted p * 4 / rank: 0.02, 0.02, 0.04, 0.04 (monotone from the top)
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([]) == [] and benjamini_hochberg([0.5]) == [0.5]
