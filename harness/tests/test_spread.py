"""`cadence-bench spread`: training time across seeds of one configuration, per machine start, against 3 %."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cadence_harness.cli import main
from cadence_harness.reading.spread import cv_interval, format_spreads, spreads
from cadence_harness.records import TAG, RunRecord, append_records, records_file


def _record(
    arm: str,
    seed: int,
    train_s: float,
    *,
    budget: str = "10ep",
    device: str = "gpu",
    boot: str = "",
    end_s: float = 0,
    compile_mode: str = "False",
) -> RunRecord:
    configuration = f"{arm}-{budget}-{compile_mode}"
    tags = {"arm": arm, "seed": str(seed), "budget": budget, "config_hash": f"{configuration}-s{seed}-{boot}"}
    tags["group_hash"] = configuration
    params = {"device": device, "device_name": "NVIDIA H200" if device == "gpu" else "AMD EPYC", "duration": budget}
    params |= {"boot_id": boot, "seed": str(seed)} if boot else {"seed": str(seed)}
    params["compile"] = compile_mode
    return RunRecord(
        run_id=f"{configuration}-s{seed}-{boot}-{end_s}",
        experiment="cifar10_fast",
        tags={f"{TAG}{key}": value for key, value in tags.items()},
        params=params,
        metrics={"final/train_s": train_s, "final/main_thread_cpu_s": 0.9 * train_s, "final/gc_s": 0.002},
        end_time=int(end_s * 1000),
    )


@pytest.mark.parametrize("n", [5, 10])
def test_the_interval_of_the_coefficient_of_variation_covers_95_percent(n: int) -> None:
    rng = np.random.default_rng(0)
    trials, cv = 4000, 0.03
    covered = 0
    for _ in range(trials):
        interval = cv_interval(list(rng.normal(3.0, 3.0 * cv, n)))
        assert interval.low is not None and interval.high is not None
        covered += interval.low <= cv <= interval.high
    assert 0.93 <= covered / trials <= 0.97


def test_a_steady_configuration_meets_the_goal_a_noisy_one_misses_it_and_five_seeds_rarely_decide() -> None:
    steady = [_record("baseline", s, 2.80 + 0.01 * (s % 3), boot="aaaa1111") for s in range(10)]
    noisy = [_record("mixup", s, t, boot="aaaa1111") for s, t in enumerate([2.0, 2.6, 3.1, 2.2, 3.4])]
    near = [_record("cutout", s, t, boot="aaaa1111") for s, t in enumerate([2.80, 2.90, 2.75, 2.86, 2.95])]
    found = {s.arm: s for s in spreads(steady + noisy + near)}
    assert found["baseline"].verdict == "met" and found["baseline"].cv.n == 10
    assert found["mixup"].verdict == "missed"
    assert found["cutout"].verdict == "inconclusive"  # CV about 2.8 %, but 5 seeds cannot show it is under 3 %
    assert found["mixup"].slowest.seed == 4
    table = format_spreads(list(found.values()))
    assert "3 configurations: goal met 1, inconclusive 1, missed 1" in table
    assert "### NVIDIA H200, machine start aaaa1111" in table


def test_seeds_are_grouped_by_machine_start_and_only_the_newest_run_of_a_configuration_counts() -> None:
    first = [_record("baseline", s, 2.8, boot="aaaa1111") for s in range(3)]
    second = [_record("baseline", s, 3.5, boot="bbbb2222") for s in range(3)]
    rerun = _record("baseline", 0, 9.9, boot="aaaa1111", end_s=10)  # a newer run of seed 0's configuration there
    found = spreads([*first, *second, rerun])
    assert [(s.start, s.train_s) for s in found] == [("aaaa1111", (9.9, 2.8, 2.8)), ("bbbb2222", (3.5, 3.5, 3.5))]
    assert spreads(first[:2]) == []  # fewer than 3 seeds: no spread
    assert len(spreads(first[:2], min_seeds=2)) == 1


def test_gpu_runs_without_a_boot_id_are_split_into_starts_by_long_pauses_and_cpu_runs_are_not() -> None:
    gpu = [_record("baseline", s, 2.8, end_s=10 * s) for s in range(3)]
    gpu += [_record("baseline", s, 3.3, end_s=1000 + 10 * s, budget="10ep") for s in range(3, 6)]
    starts = {s.start: s.cv.n for s in spreads(gpu)}
    assert starts == {"inferred 1": 3, "inferred 2": 3}
    cpu = [_record("baseline", s, 30.0 + s, device="cpu", end_s=500 * s) for s in range(3)]
    assert [(s.start, s.cv.n) for s in spreads(cpu)] == [("unrecorded", 3)]


def test_the_command_reads_run_records_and_names_a_missing_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    append_records(records_file(tmp_path, "cifar10_fast"), [_record("baseline", s, 2.8 + s / 100) for s in range(4)])
    assert main(["spread", "cifar10_fast", "--records", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| baseline | 10ep | 4 | 2.81 |" in out and "machine start inferred 1" in out
    assert main(["spread", "sst2_bert_tiny", "--records", str(tmp_path)]) == 2
    assert "cadence-bench spread: `spread` 'sst2_bert_tiny': no run records at" in capsys.readouterr().err


def test_a_misspelled_experiment_or_study_gets_the_closest_record_file_not_a_grid_that_would_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("cifar10_fast", "cifar10_resnet20_study"):
        append_records(records_file(tmp_path, name), [_record("baseline", 0, 2.8)])
    out = ["--out", str(tmp_path / "out")]
    for argv, asked, close in (
        (["spread", "cifar10_fsat"], "`spread` 'cifar10_fsat'", "cifar10_fast"),
        (["report", "--study", "cifar10_resnet20_sudy", *out], "`--study` 'cifar10_resnet20_sudy'",
         "cifar10_resnet20_study"),
    ):  # fmt: skip
        assert main([*argv, "--records", str(tmp_path)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"cadence-bench {argv[0]}: {asked}: no run records at ")
        assert f"; did you mean {close!r}" in line and "cadence-bench grid" not in line
        assert line.endswith("records there: cifar10_fast, cifar10_resnet20_study (or pass --records FOLDER)")
    assert main(["spread", "cifar10_resnet20", "--records", str(tmp_path)]) == 2  # a shipped recipe never run
    assert "`cadence-bench grid cifar10_resnet20` writes them there" in capsys.readouterr().err


def test_the_gpu_timing_script_parses_and_refuses_a_machine_without_cuda(tmp_path: Path) -> None:
    import subprocess
    import sys

    import torch

    script = Path(__file__).parents[1] / "gpu_timing.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the script would run the check")
    env = {"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": str(tmp_path / "out")}
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0 and "gpu_timing.sh needs a CUDA GPU" in result.stderr


def test_two_configurations_of_one_arm_and_budget_are_named_by_what_differs() -> None:
    eager = [_record("baseline", s, 2.8 + s / 100, boot="aaaa1111") for s in range(3)]
    compiled = [_record("baseline", s, 2.1, boot="aaaa1111", compile_mode="reduce-overhead") for s in range(3)]
    found = spreads(eager + compiled)
    assert sorted(s.settings for s in found) == ["compile=False", "compile=reduce-overhead"]
    assert "| baseline (compile=reduce-overhead) | 10ep | 3 | 2.10 |" in format_spreads(found)
    assert spreads(eager)[0].settings == ""  # alone, nothing to tell apart


def _timed(seed: int, train_s: float, thread_cpu_s: float, eval_s: float) -> RunRecord:
    run = _record("baseline", seed, train_s, boot="aaaa1111")
    run.metrics.update({"final/main_thread_cpu_s": thread_cpu_s, "final/eval_s": eval_s})
    return run


def test_the_likely_cause_is_the_hosts_speed_when_time_follows_the_thread_cpu_and_evaluation_holds() -> None:
    # the H200 start of 2026-11-28 in miniature: the same work, different thread CPU time, a steady evaluation
    trains = [2.94, 3.03, 3.08, 3.13, 3.26, 3.40, 3.75]
    host_bound = [_timed(s, t, t - 1.0 + 0.01 * (s % 2), 0.892 + 0.001 * (s % 3)) for s, t in enumerate(trains)]
    (spread,) = spreads(host_bound)
    assert spread.thread_cpu_r is not None and spread.thread_cpu_r > 0.99
    assert spread.eval_cv is not None and spread.eval_cv < 0.002
    assert spread.likely_cause == "host speed"
    table = format_spreads([spread])
    assert "| missed | 0.1% | 1.00 | host speed |" in table and "1 of them host-bound" in table
    # evaluation slows with training: the device (a throttled card) is the likelier cause
    device = [_timed(s, t, 2.0, 0.3 * t) for s, t in enumerate(trains)]
    assert spreads(device)[0].likely_cause == "device" and spreads(device)[0].thread_cpu_r is None  # constant CPU
    # time unrelated to the thread's CPU and a steady evaluation: no cause is named
    unrelated = [_timed(s, t, 2.0 + 0.1 * ((s * 3) % 7), 0.892) for s, t in enumerate(trains)]
    assert spreads(unrelated)[0].likely_cause == "-"
    # records without evaluation times (older ones): nothing is claimed
    assert spreads([_record("baseline", s, t, boot="b") for s, t in enumerate(trains)])[0].likely_cause == "-"


def test_a_compiled_configuration_says_what_its_runs_compiled_and_flags_one_that_compiled_nothing() -> None:
    def compiled(seed: int, graphs: float, disabled: float = 0.0) -> RunRecord:
        run = _record("baseline", seed, 2.1 + seed / 100, boot="aaaa1111", compile_mode="reduce-overhead")
        run.metrics.update({"final/compiled_graphs": graphs, "final/graph_breaks": 0.0, "final/cudagraph_skips": 1.0,
                            "final/compile_disabled": disabled})  # fmt: skip
        return run

    # an in-process grid: the first run compiles, the others reuse its graphs
    (spread,) = spreads([compiled(0, 3.0), compiled(1, 0.0), compiled(2, 0.0)])
    assert spread.compiled == "compile=reduce-overhead: 3 graphs, 0 graph breaks, 3 CUDA-graph skips over 3 runs"
    assert f"- baseline, 10ep: {spread.compiled}" in format_spreads([spread])
    (eager_in_disguise,) = spreads([compiled(s, 0.0, disabled=1.0) for s in range(3)])
    assert eager_in_disguise.compiled.endswith("NOTHING WAS COMPILED: these timings are eager")
    older = [_record("baseline", s, 2.1, boot="b", compile_mode="reduce-overhead") for s in range(3)]
    not_recorded = "compile=reduce-overhead: what was compiled is not recorded (records before 2026-11-28)"
    assert spreads(older)[0].compiled == not_recorded
    for run in older:  # the H200 runs of 2026-11-28: torch 2.11 never compiled the FLOP-counted forward
        run.params["versions.torch"] = "2.11.0+cu130"
    assert "torch 2.11.0+cu130: NOTHING WAS COMPILED" in spreads(older)[0].compiled
    assert spreads([_record("baseline", s, 2.8, boot="b") for s in range(3)])[0].compiled == ""  # not compiled
