"""The workload callgrind counts per step runs what it says, with the collector off only while it counts."""

from __future__ import annotations

import gc

from cadence_harness.benchmarks import instructions_workload
from cadence_harness.benchmarks.step_workload import Data


def test_both_loops_train_the_steps_asked_for_and_the_collector_is_back_on() -> None:
    data = Data.build(4)
    trainer = instructions_workload.trainer_run(data, 3)
    assert int(trainer.state.timestamp.batch) == 3
    flops = next(c for c in trainer.state.callbacks if type(c).__name__ == "FlopCounter")
    assert sum(flops.counts.values()) == 3  # the FLOP counter saw every step
    twin = instructions_workload.hand_run(data, 2)
    assert twin.optimizer.state  # it stepped
    instructions_workload.main(["hand", "2", "--batch-size", "4"])
    assert gc.isenabled()
