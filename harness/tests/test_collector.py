"""The garbage collector and the run clock: one full collection before training, pauses inside it recorded."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from cadence import Callback
from cadence_harness.running.collector import CollectorPauses, collect_and_freeze, collect_before_run
from cadence_harness.running.timing import RunTimer


@pytest.fixture
def manual_collector() -> Iterator[None]:
    """No automatic collections: only the code's own `gc.collect()` calls happen, so counts are exact."""
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


class Collects(Callback):
    """A full collection in every training step and at every evaluation's start; leaves a cycle before fit."""

    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at
        self.garbage_before_fit: weakref.ref[_Node] | None = None
        self.alive_in_training: list[bool] = []

    def init(self, state: Any, logger: Any) -> None:
        self.garbage_before_fit = weakref.ref(_Node())  # unreachable at once, freed only by a collection

    def before_train_batch(self, state: Any, logger: Any) -> None:
        assert self.garbage_before_fit is not None
        self.alive_in_training.append(self.garbage_before_fit() is not None)
        gc.collect()
        if self.fail_at is not None and int(state.timestamp.batch) == self.fail_at:
            raise RuntimeError("a failure in the middle of training")

    def eval_start(self, state: Any, logger: Any) -> None:
        gc.collect()


@pytest.mark.usefixtures("manual_collector")
def test_collections_in_training_are_counted_and_those_in_evaluation_are_not(linear_fit: Any) -> None:
    timer, callback = RunTimer("MulticlassAccuracy", target=None), Collects()
    linear_fit([timer, callback])  # the timer first: its clock runs as the callback collects
    summary = timer.summary(torch.device("cpu"))
    assert summary["final/gc_full_collections"] == 4  # one per training step; the 2 at evaluations are outside
    assert summary["final/gc_collections"] == 4
    assert 0 < summary["final/gc_s"] < summary["final/train_s"]
    assert summary["final/gc_before_s"] > 0


@pytest.mark.usefixtures("manual_collector")
def test_the_run_collects_once_before_its_clock_starts(linear_fit: Any) -> None:
    timer, callback = RunTimer("MulticlassAccuracy", target=None), Collects()
    linear_fit([timer, callback])  # the timer first: its clock runs as the callback collects
    assert callback.alive_in_training == [False] * 4  # the cycle made before the fit was freed before training
    assert timer.collector._on_collection not in gc.callbacks


@pytest.mark.usefixtures("manual_collector")
def test_a_fit_that_raises_stops_listening_to_the_collector(linear_fit: Any) -> None:
    timer, callback = RunTimer("MulticlassAccuracy", target=None), Collects(fail_at=1)
    with pytest.raises(RuntimeError, match="middle of training"):
        linear_fit([timer, callback])  # the timer first: its clock runs as the callback collects
    assert len(callback.alive_in_training) == 2
    assert timer.collector._on_collection not in gc.callbacks


@pytest.mark.usefixtures("manual_collector")
def test_only_collections_that_start_inside_the_region_are_timed() -> None:
    inside = [False]
    pauses = CollectorPauses(inside=lambda: inside[0])
    pauses.start()
    pauses.start()  # once installed, not twice
    gc.collect()
    gc.collect(0)
    inside[0] = True
    gc.collect(0)
    gc.collect(1)
    gc.collect()
    pauses.stop()
    pauses.stop()  # idempotent: the fit's end and the run's close both stop it
    gc.collect()  # after stop: not seen
    assert pauses.collections == [1, 1, 1]
    assert pauses.summary()["final/gc_collections"] == 3.0 and pauses.summary()["final/gc_s"] > 0


@pytest.mark.usefixtures("manual_collector")
def test_collecting_before_a_run_frees_cycles() -> None:
    node = _Node()
    alive = weakref.ref(node)
    del node
    assert alive() is not None
    assert collect_before_run() > 0
    assert alive() is None


@pytest.mark.usefixtures("manual_collector")
def test_between_runs_the_garbage_goes_and_what_lives_is_frozen_out_of_later_collections() -> None:
    garbage, living = _Node(), _Node()
    freed = weakref.ref(garbage)
    del garbage
    try:
        assert collect_and_freeze() > 0
        assert freed() is None  # collected before the freeze, not frozen
        assert gc.get_freeze_count() > 0
        assert not any(obj is living for obj in gc.get_objects())  # later collections do not walk it
    finally:
        gc.unfreeze()
