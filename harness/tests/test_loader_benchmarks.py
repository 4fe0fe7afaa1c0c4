"""The harness-step and loader benchmarks' code paths at tiny sizes with one repeat, so that they cannot rot
(they time nothing: no assertion reads a number)."""

from __future__ import annotations

import pytest

from cadence_harness.benchmarks import harness_step, loader_rate
from cadence_harness.benchmarks.paired_goal import goal_text, goal_verdict, paired_difference
from cadence_harness.stats import Interval


def test_the_harness_step_benchmark_prints_every_variant_the_pieces_and_its_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    harness_step.main(["--steps", "10", "--repeats", "1", "--batch-size", "2"])
    printed = capsys.readouterr().out
    for variant in harness_step.VARIANTS:
        assert variant in printed
    row = harness_step.harness_variant("sqlite:////tmp/any.db").removeprefix("+ ")  # a thread unless CUDA is here
    judged = [line for line in printed.splitlines() if "goal <= 200 us:" in line]
    assert len(judged) == 4  # both writers, on the wall clock and on the training thread's CPU time
    assert [line.strip().split(" (")[0] for line in judged] == ["MLFlowLogger, child writes"] * 2 + [
        "MLFlowLogger, thread writes"
    ] * 2
    assert sum(f"{row} (" in line and "as run here" in line for line in judged) == 2
    assert harness_step.CONTROL in printed and "the lockstep's own bias (A/A" in printed
    assert "as a share of the twin's step:" in printed
    for piece in ("loader + flip/crop:", "MLFlowLogger.log_metrics", "evaluation:", "FlopCounter's counted step"):
        assert piece in printed
    assert "logical CPUs" in printed


def test_the_loader_benchmark_prints_both_loaders_rates_and_goals(capsys: pytest.CaptureFixture[str]) -> None:
    loader_rate.main(["--repeats", "1", "--images", "1100", "--texts", "400"])
    printed = capsys.readouterr().out
    assert ">= 50k/s:" in printed and ">= 20k/s:" in printed and "logical CPUs" in printed
    assert "LengthBucketLoader (by length, x16)" in printed and "TensorLoader (trimmed to longest)" in printed
    assert "tokenising 400 texts, again (cache)" in printed


def _lockstep(twin_us: float, extra_us: float) -> harness_step.Lockstep:
    """A run of 20 steps whose twin took `twin_us` and whose harness took `extra_us` more on every step, on every
    clock."""
    run, now = harness_step.Lockstep(start=(0.0, 0.0, 0.0)), 0.0
    for _ in range(20):
        now += (twin_us + extra_us) / 1e6
        run.reached.append((now,) * 3)
        now += twin_us / 1e6
        run.twin_done.append((now,) * 3)
    return run


def test_the_goal_is_judged_by_the_interval_of_the_runs_paired_differences() -> None:
    """Each run pairs every harness step with a twin step beside it; a run on which the machine was slow moves
    both. Decided only when the interval is on one side of 200 us."""
    twin = [1000.0, 1300.0, 1100.0]
    results = {name: [_lockstep(t, 0.0) for t in twin] for name in harness_step.VARIANTS}
    results[harness_step.CHILD] = [_lockstep(t, d) for t, d in zip(twin, (150.0, 160.0, 155.0))]
    run = results[harness_step.CHILD][1]
    assert run.harness_us(0) == pytest.approx(1460.0) and run.twin_us(0) == pytest.approx(1300.0)
    extra = harness_step.harness_extra_us(results, harness_step.CHILD)
    assert extra.n == 3 and extra.mean == pytest.approx(155.0)
    assert extra.high < 200  # unpaired, the runs' 300 us spread would hide it
    assert extra.low == pytest.approx(155.0 - 4.302652729911275 * 5.0 / 3**0.5)
    assert goal_verdict(extra, 200.0) == "PASS"
    assert goal_text(extra, 200.0, "us per step") == (
        f"155.0 [{extra.low:.1f}, {extra.high:.1f}] (95%, n=3 paired repeats) us per step; goal <= 200 us: PASS"
    )
    assert goal_verdict(Interval(235.0, 210.0, 260.0, 3), 200.0) == "FAIL"
    assert goal_verdict(Interval(205.0, 150.0, 260.0, 3), 200.0).startswith("INCONCLUSIVE")
    assert goal_verdict(Interval(150.0, None, None, 1), 200.0).startswith("PASS (one repeat: no interval")
    with pytest.raises(ValueError, match="equally many repeats"):
        paired_difference([1.0, 2.0], [1.0])
