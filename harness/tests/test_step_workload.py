"""The lockstep's two loops evaluate equally often, half an epoch apart (`step_workload`), and the A/A control
puts a hand-written loop where the harness evaluates."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cadence import Callback
from cadence_harness.benchmarks import harness_step, step_workload
from cadence_harness.benchmarks.step_workload import (
    STEPS_PER_EPOCH,
    Data,
    HandTwin,
    MLflowStore,
    harness_eval_steps,
    twin_eval_steps,
)


@pytest.mark.parametrize("steps", [10, STEPS_PER_EPOCH, STEPS_PER_EPOCH + 1, 136, 192, 640, 700])
def test_the_twin_evaluates_as_often_as_the_harness_half_an_epoch_before_each(steps: int) -> None:
    harness, twin = list(harness_eval_steps(steps)), sorted(twin_eval_steps(steps))
    assert len(twin) == len(harness) == (steps - 1) // STEPS_PER_EPOCH
    assert [h - t for h, t in zip(harness, twin)] == [STEPS_PER_EPOCH // 2] * len(harness)
    assert all(1 <= step <= steps for step in [*harness, *twin])


class _EvalSteps(Callback):
    """The step whose span holds each evaluation: the one after the batch the evaluation follows."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def eval_start(self, state: Any, logger: Any) -> None:
        self.steps.append(state.timestamp.batch + 1)


def test_the_harness_evaluates_in_the_spans_harness_eval_steps_names() -> None:
    steps, recorder, store = 2 * STEPS_PER_EPOCH + 8, _EvalSteps(), MLflowStore()
    try:
        harness_step.trainer_run(Data.build(4), steps, 0, store, first=[recorder])
    finally:
        store.close()
    assert recorder.steps[:-1] == list(harness_eval_steps(steps))  # the last follows the run's last step
    assert recorder.steps[-1] == steps + 1


def test_a_hand_twin_evaluates_before_exactly_its_eval_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    twin, seen = HandTwin(Data.build(4), {3, 5}), []
    monkeypatch.setattr(step_workload, "hand_eval", lambda model, data: seen.append(twin.steps))
    weight = twin.model[1].weight.detach().clone()
    for _ in range(6):
        twin.step()
    assert seen == [3, 5] and twin.steps == 6
    assert not torch.equal(weight, twin.model[1].weight)  # it trains


def test_the_a_a_control_runs_two_hand_loops_in_the_lockstep_s_places() -> None:
    run = harness_step.control_run(Data.build(4), STEPS_PER_EPOCH + 40)
    assert len(run.reached) == len(run.twin_done) == STEPS_PER_EPOCH + 40
    assert run.harness_us(0) > 0 and run.twin_us(0) > 0


def test_the_flop_counted_step_is_the_one_runtimer_timed_apart() -> None:
    """Read from RunTimer's shape warm-up, not as a difference of two runs' first steps (which read -5 ms once)."""
    store, data = MLflowStore(), Data.build(4)
    try:
        with_counter, _ = harness_step.trainer_run(data, 12, 2, store)
        without, _ = harness_step.trainer_run(data, 12, 1, store)
    finally:
        store.close()
    assert with_counter.counted_s > 0 and without.counted_s == 0
    results = {"+ FlopCounter": [with_counter]}
    counted_ms, steady_ms = harness_step.flop_counted_step_ms(results)
    assert counted_ms == pytest.approx(1e3 * with_counter.counted_s) and steady_ms > 0
