"""The harness-step and loader benchmarks' code paths at tiny sizes with one repeat, so that they cannot rot
(they time nothing: no assertion reads a number)."""

from __future__ import annotations

import pytest

from cadence_harness.benchmarks import harness_step, loader_rate


def test_the_harness_step_benchmark_prints_every_variant_the_pieces_and_its_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    harness_step.main(["--steps", "10", "--repeats", "1", "--batch-size", "2"])
    printed = capsys.readouterr().out
    for variant in harness_step.VARIANTS:
        assert variant in printed
    assert "harness - hand-written, main thread:" in printed and "goal <= 200 us:" in printed
    for piece in ("loader + flip/crop:", "MLFlowLogger.log_metrics", "evaluation:", "FlopCounter's counted step"):
        assert piece in printed
    assert "logical CPUs" in printed


def test_the_loader_benchmark_prints_both_loaders_rates_and_goals(capsys: pytest.CaptureFixture[str]) -> None:
    loader_rate.main(["--repeats", "1", "--images", "1100", "--texts", "400"])
    printed = capsys.readouterr().out
    assert ">= 50k/s:" in printed and ">= 20k/s:" in printed and "logical CPUs" in printed
    assert "LengthBucketLoader (by length, x16)" in printed and "TensorLoader (trimmed to longest)" in printed
    assert "tokenising 400 texts, again (cache)" in printed
