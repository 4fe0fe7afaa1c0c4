"""The harness's step timed phase by phase beside its twin's (`step_phases`)."""

from __future__ import annotations

import pytest

from cadence_harness.benchmarks import step_phases
from cadence_harness.benchmarks.harness_step import WARMUP_STEPS

HARNESS = ["before_dataloader", "after_dataloader", "batch_start", "before_train_batch", "before_forward",
           "after_forward", "before_loss", "after_loss", "before_backward", "after_backward", "after_train_batch",
           "batch_end"]  # fmt: skip
TWIN = ["start", "batch", "zeroed", "forward", "loss", "backward", "stepped"]


def _marks(steps: int) -> list[step_phases.Mark]:
    """A run whose harness events are 10 us apart (after 5 us of bookkeeping) and twin phases 3 us apart."""
    marks: list[step_phases.Mark] = [("opened", 0.0)]
    now = 0.0
    for _ in range(steps):
        now += 5e-6
        for name in HARNESS:
            marks.append((name, now))
            now += 10e-6
        marks.append(("reached", now))
        for name in TWIN:
            now += 3e-6
            marks.append((name, now))
        now += 1e-6
        marks.append(("opened", now))
    return marks


def test_phases_are_cut_from_the_marks_between_the_lockstep_clock_s() -> None:
    rows = step_phases.phase_times(_marks(WARMUP_STEPS + 5))
    assert all(len(times) == 5 for times in rows.values())  # the warm-up steps are left out
    expected = {
        "batch (loader, augmentation)": (10, 3),
        "zero_grad": (10, 3),
        "forward": (10, 3),
        "loss": (10, 3),
        "backward": (10, 3),
        "optimizer step (+ the Trainer's after it)": (10, 3),
        "total": (5 + 10 * 12, 3 * 7 + 1),
    }
    for row, (ours, theirs) in expected.items():
        assert rows[row][0] == (pytest.approx(ours), pytest.approx(theirs)), row
    assert rows["between"][0] == (pytest.approx(125 - 60), pytest.approx(22 - 18))  # the rest of each span


def test_a_short_run_prints_every_phase_and_the_rest_is_never_negative(capsys: pytest.CaptureFixture[str]) -> None:
    rows = step_phases.main(["--steps", str(WARMUP_STEPS + 12), "--batch-size", "4"])
    out = capsys.readouterr().out
    for row, _, _ in step_phases.PHASES:
        assert row in out
    for row, _ in step_phases.EVAL_PHASES:
        assert row in out  # the fit's evaluation at its end
    assert len(rows["total"]) == 12
    assert all(ours >= 0 and theirs >= 0 for ours, theirs in rows["between"])  # phases lie inside their spans
    assert all(
        ours > 0 and theirs > 0 for times in rows.values() for ours, theirs in times if times is not rows["between"]
    )
