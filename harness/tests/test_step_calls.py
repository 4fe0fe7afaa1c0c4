"""The harness's Python calls per training step, counted beside its hand-written twin (`step_calls`)."""

from __future__ import annotations

import sys

import pytest

from cadence_harness.benchmarks import step_calls
from cadence_harness.benchmarks.harness_step import VARIANTS, WARMUP_STEPS
from cadence_harness.benchmarks.step_workload import STEPS_PER_EPOCH


def test_the_call_counter_counts_python_calls_and_c_calls_of_its_thread() -> None:
    counter = step_calls.CallCounter()

    def work() -> int:
        return len([1, 2])

    sys.setprofile(counter)
    try:
        work()
        work()
    finally:
        sys.setprofile(None)
    assert counter.python == 2 and counter.c >= 2  # two calls of work, each calling len (then setprofile itself)


def test_the_full_harness_stays_within_its_budgets_of_extra_calls_per_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every variant over two epochs with an evaluation each: printed, and the full harness held to the budget."""
    counts = step_calls.main(["--steps", str(2 * STEPS_PER_EPOCH + WARMUP_STEPS), "--batch-size", "4"])
    out = capsys.readouterr().out
    for variant in VARIANTS:
        assert variant in out
    for kind, budget in step_calls.BUDGETS.items():
        assert f"{kind} calls per step over its twin, within the budget of {budget}" in out
    full, bare = counts[VARIANTS[-1]], counts[VARIANTS[0]]
    assert 50 < full.twin["python"] < bare.harness["python"] < full.harness["python"]  # each piece adds calls
    assert full.extra("python") <= step_calls.PYTHON_CALLS_BUDGET, full
    assert full.extra("c") <= step_calls.C_CALLS_BUDGET, full


def test_where_maps_the_full_harness_extra_bytecodes_to_its_functions(capsys: pytest.CaptureFixture[str]) -> None:
    """The engine's in-batch dispatch runs only in the harness's spans; the twin's own step in both kinds of span
    would be a bug in the split (the twin runs at BATCH_END, inside the harness's run)."""
    assert step_calls.main(["--where", "--steps", str(STEPS_PER_EPOCH + WARMUP_STEPS), "--batch-size", "4"]) == {}
    out = capsys.readouterr().out
    assert f"{STEPS_PER_EPOCH} steps: bytecodes per step" in out
    lines = {line.split(" (")[0].split()[-1]: line for line in out.splitlines()[1:]}
    assert "run_planned" in lines and "_train_batch" in lines
    assert "step (benchmarks/harness_step.py" not in out  # HandTwin.step: as many in the twin's spans, no extra
