"""The overhead and compiled-step benchmarks' code paths at tiny sizes, so that they cannot rot (they time nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from cadence_harness.benchmarks import compiled, overhead


def test_the_overhead_benchmark_times_every_variant_and_prints_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    overhead.main(["--batches", "8", "--repeats", "1", "--clock", "cpu"])
    printed = capsys.readouterr().out
    for variant in ("raw PyTorch loop", "cadence Trainer", "+ 10 idle methods", "+ 10 no-op methods on every event"):
        assert variant in printed
    assert printed.count("<= 1.05x or <= 50 us:") == 6 and "logical CPUs" in printed  # 3 variants x 2 setups
    assert "mlp: MLP 256-256-256-10" in printed and "bare: Linear(4, 2)" in printed and "16 batches of 2" in printed


def test_the_compiled_step_benchmark_alternates_an_eager_and_a_compiled_trainer() -> None:
    result = compiled.measure(rounds=2, batches_per_round=1, compile_config={"backend": "eager"})
    assert result["steps"] == 1 and result["graphs"] >= 1
    assert result["eager"] > 0 and result["compiled"] > 0 and result["compile_s"] > 0


@pytest.mark.slow
def test_the_first_run_benchmark_trains_the_demo_in_a_fresh_process_and_compares_its_runs(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence_harness.benchmarks import first_run

    first_run.main(["--runs", "2", "--processes", "1", "--data-dir", str(tmp_path)])  # no CIFAR-10 there: digits
    printed = capsys.readouterr().out
    assert "process 1 (demo-digits): train_s " in printed and "first over the rest's median" in printed
    with pytest.raises(SystemExit):
        first_run.main(["--runs", "1"])


def test_the_suite_s_help_lists_the_benchmarks_and_runs_none(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m cadence_harness.benchmarks --help`` answers as every benchmark module does, instead of starting
    the whole suite (minutes)."""
    import importlib

    suite = importlib.import_module("cadence_harness.benchmarks.__main__")

    def no_benchmark(name: str) -> None:
        raise AssertionError(f"--help started {name}")

    monkeypatch.setattr(suite.importlib, "import_module", no_benchmark)
    with pytest.raises(SystemExit) as exit_:
        suite.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m cadence_harness.benchmarks")
    assert all(f"\n  {name}: " in text for name in suite.BENCHMARKS) and "``" not in text
    assert "  first_run: The first run of a process against the runs after it" in text
    with pytest.raises(SystemExit) as exit_:
        suite.main(["--bogus"])
    assert exit_.value.code == 2
