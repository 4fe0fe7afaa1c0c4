"""Times are compared only within one machine: the recorded CPU name carries its family and model, a speedup in
time pairs runs of one machine, and an identity arm run on another machine sets no timing noise floor."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cadence_harness.reading.claims import INCONCLUSIVE, judge, parse_claims
from cadence_harness.reading.combination_search import greedy_search
from cadence_harness.reading.noise_floor import identity_arms
from cadence_harness.reading.summaries import sections_of
from cadence_harness.records import RunRecord, same_machine
from cadence_harness.running.provenance import cpu_name, environment
from cadence_harness.testing import study_run

OLD, NEW = "AMD EPYC", "AMD EPYC (family 26, model 2)"


def _run(
    arm: str, budget: str, seed: int, accuracy: float, train_s: float, machine: str, length: str = ""
) -> RunRecord:
    params, cpu = {"device_name": machine}, {"final/cpu_s": 2 * train_s}
    return study_run(arm, budget, seed, accuracy=accuracy, train_s=train_s, length=length, params=params, metrics=cpu)


def _curve(arm: str, points: list[tuple[str, float, float]], machine: str) -> list[RunRecord]:
    """`arm`'s runs of 3 seeds at each (budget, accuracy, seconds) point, on `machine`."""
    return [
        _run(arm, budget, s, accuracy + s / 100, seconds, machine)
        for budget, accuracy, seconds in points
        for s in range(3)
    ]


def _baseline(machine: str = OLD) -> list[RunRecord]:
    return _curve("baseline", [("2ep", 0.40, 20.0), ("4ep", 0.50, 40.0), ("8ep", 0.60, 80.0)], machine)


def test_the_cpu_name_carries_family_and_model_which_a_virtual_machines_brand_hides() -> None:
    zen5 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n\n"
    assert cpu_name(zen5 + "processor\t: 1\ncpu family\t: 25\n") == NEW  # the first processor speaks for all
    assert cpu_name("model name\t: Apple M2\n") == "Apple M2"  # nothing more to tell: the name alone


def test_same_machine_names_the_one_machine_or_none() -> None:
    one, other = _run("a", "2ep", 0, 0.5, 1.0, OLD), _run("b", "2ep", 0, 0.5, 1.0, NEW)
    assert same_machine([one, one]) == OLD and same_machine([one, other]) is None
    gpu = _run("a", "2ep", 0, 0.5, 1.0, "NVIDIA H200")
    hosted = dataclasses.replace(gpu, params={**gpu.params, "host_cpu": "Intel Xeon (family 6, model 143)"})
    assert same_machine([hosted, hosted]) == "NVIDIA H200 on Intel Xeon (family 6, model 143)"
    assert same_machine([gpu, hosted]) is None  # one card, two hosts: a host-bound run's time is the host's


def test_a_run_records_its_machine_start_and_on_a_gpu_its_host() -> None:
    env = environment(torch.device("cpu"))
    assert (
        env["device_name"] == cpu_name(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").is_file() else True
    )
    assert len(env["boot_id"]) > 0 and "host_cpu" not in env  # on a CPU the device is the host
    record = RunRecord(
        run_id="r", experiment="e", tags={}, params={**env, "seed": "0"}, metrics={"final/accuracy": 0.5}
    )
    line = json.loads(record.to_json())
    assert line["machine"]["boot_id"] == env["boot_id"]  # kept with the machine, not among the settings


def test_an_arm_run_on_another_machine_is_compared_in_accuracy_and_flops_never_in_time() -> None:
    """The arm's runs took half the baseline's time for the same work on a faster machine: no time speedup."""
    arm = _curve("fast", [("2ep", 0.45, 10.0), ("4ep", 0.55, 20.0), ("8ep", 0.62, 40.0)], NEW)
    (section,) = sections_of(_baseline() + arm)
    curve = section.sweep_curve("fast")
    assert curve is not None
    for unit in ("train_s", "cpu_s"):
        speedups = section.speedups_of(curve, unit)
        assert speedups and all("times of different machines" in s.left_out for s in speedups)
        assert all(s.q is None for s in speedups)  # not in the better/worse family either
    assert any(s.verdict == "better" or s.low is not None for s in section.speedups_of(curve, "flops"))
    row = next(s for s in section.summaries if s.arm == "fast" and s.budget == "4ep")
    assert row.speedup is None and row.flops_ratio is not None and row.accuracy_delta is not None
    (same,) = sections_of(_baseline() + [_run(r.arm, r.budget, r.seed, *_values(r), OLD) for r in arm])
    assert all(not s.left_out for s in same.speedups_of(same.sweep_curve("fast"), "train_s"))  # type: ignore[arg-type]


def test_the_recipe_search_compares_times_within_one_machine_only() -> None:
    fast = _curve("fast", [("2ep", 0.50, 10.0), ("4ep", 0.60, 20.0), ("8ep", 0.62, 40.0)], NEW)
    (section,) = sections_of(_baseline() + fast)
    in_time, in_flops = greedy_search(section, "train_s"), greedy_search(section, "flops")
    assert in_time.singles[0][:2] == ("fast", None) and in_time.elsewhere == {"fast"}
    assert "fast | not compared: its times and the baseline's come from different machines" in in_time.markdown()
    assert in_flops.singles[0][1] is not None and not in_flops.elsewhere  # FLOPs compare across machines


def _values(record: RunRecord) -> tuple[float, float]:
    return record.metrics["final/accuracy"], record.metrics["final/train_s"]


def test_an_identity_arm_on_another_machine_shows_the_machines_difference_and_sets_no_floor() -> None:
    """Scale Schedule 0.5 on a newer machine repeats the baseline's 2ep and 4ep to the bit in 0.54x the time."""
    twins = [
        _run("scale_schedule", budget, s, accuracy + s / 100, seconds * 0.54, NEW, length)
        for budget, length, accuracy, seconds in [("4ep", "2ep", 0.40, 20.0), ("8ep", "4ep", 0.50, 40.0)]
        for s in range(3)
    ]
    floor = identity_arms(_baseline() + twins)
    assert floor is not None and floor.arms == ("scale_schedule",)
    assert floor.factor is None and not floor.ratios and len(floor.elsewhere) == 6
    assert floor.machines == f"{NEW} against the baseline's {OLD}"
    text = floor.format()
    assert "to the bit), but ran on another machine (AMD EPYC (family 26, model 2) against the baseline's" in text
    assert "time ratios were 1.85, 1.85" in text and "unmeasured" in text
    (section,) = sections_of(_baseline() + twins)
    (claim,) = parse_claims(
        {"claims": [{"claim": "1.5x", "source": "x", "expects": "cost", "unit": "train_s", "size": 1.5}]}, where="t"
    )
    verdict = judge(claim, section, "scale_schedule")
    assert verdict.verdict == INCONCLUSIVE and "ran on another machine than its baseline" in verdict.reason
    mixed = twins[:3] + [_run(r.arm, r.budget, r.seed, *_values(r), OLD, "4ep") for r in twins[3:]]
    floor = identity_arms(_baseline() + mixed)
    assert floor is not None and floor.factor == pytest.approx(1 / 0.54) and len(floor.elsewhere) == 3
