"""`report` on a store with known runs: table numbers computed independently, plots, cards, index; throughput
and the fraction of the device's peak on records built here."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from cadence.loggers import MLFlowLogger
from cadence_harness.reading.cards import MARK_END, MARK_START, write_cards, write_index
from cadence_harness.reading.peaks import peak_flops, peak_fraction
from cadence_harness.reading.report import pareto_front, report_from_runs
from cadence_harness.reading.summaries import speedup_to_target, summarize
from cadence_harness.reading.tables import _target_ratio, format_table, peak_note
from cadence_harness.records import RunRecord
from cadence_harness.running.recipe import Recipe
from cadence_harness.running.runspec import RunSpec
from cadence_harness.store_report import build_report

RECIPE = Recipe(
    name="known",
    model="tv/resnet20",
    data="digits",
    duration="2ep",
    methods={"fast": {}, "slow": {}},
    target_accuracy=0.8,
)
RUNS = {  # arm: per seed (accuracy, train seconds, time to target or None)
    (): [(0.80, 10.0, 6.0), (0.82, 11.0, 7.0), (0.81, 12.0, 8.0)],
    ("fast",): [(0.83, 8.0, 4.0), (0.82, 9.0, 5.0), (0.85, 7.0, 3.0)],
    ("slow",): [(0.70, 20.0, None), (0.72, 22.0, None)],
}


def log_known_runs(uri: str) -> None:
    """Write runs the way `run.execute` does (tags, params, final/* metrics), without training."""
    for arm, per_seed in RUNS.items():
        for seed, (accuracy, train_s, reach) in enumerate(per_seed):
            spec = RunSpec(RECIPE, arm, seed)
            logger = MLFlowLogger(
                experiment_name="known",
                run_name=spec.run_name,
                tracking_uri=uri,
                tags={**spec.tags(), "cadence.command": "cadence-bench grid known.toml"},
            )
            logger.log_hyperparameters(
                {
                    "model": "tv/resnet20",
                    "data": "digits",
                    "duration": "2ep",
                    "batch_size": 32,
                    "target_accuracy": 0.8,
                    "device_name": "test cpu",
                    "precision": "fp32",
                }
            )
            metrics = {
                "final/accuracy": accuracy,
                "final/train_s": train_s,
                "final/wall_s": train_s + 1,
                "final/samples_per_s": 1000 / train_s,
                "final/peak_memory_mb": 100.0,
                "final/reached_target": float(reach is not None),
            }
            if reach is not None:
                metrics["final/time_to_target_s"] = reach
            logger.log_metrics({"metrics/eval/MulticlassAccuracy": accuracy - 0.1, "time/train_s": train_s / 2}, step=5)
            logger.log_metrics(
                {"metrics/eval/MulticlassAccuracy": accuracy, "time/train_s": train_s, **metrics}, step=10
            )
            logger.finish("FINISHED")


def t_half(values: list[float]) -> float:
    return scipy_stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def log_ratio_t(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the paired ratios and its t-interval on their logs, written out."""
    logs = [math.log(a / b) for a, b in zip(numerator, denominator)]
    half = t_half(logs)
    return (
        math.exp(statistics.mean(logs)),
        math.exp(statistics.mean(logs) - half),
        math.exp(statistics.mean(logs) + half),
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    log_known_runs(uri)
    return build_report(["known"], tracking_uri=uri, out_dir=folder / "report")


def test_table_numbers_match_an_independent_computation(report: Any) -> None:
    rows = {s.arm: s for s in report.summaries}
    assert list(rows) == ["baseline", "fast", "slow"]
    base_acc, fast_acc = [r[0] for r in RUNS[()]], [r[0] for r in RUNS[("fast",)]]
    base_time, fast_time = [r[1] for r in RUNS[()]], [r[1] for r in RUNS[("fast",)]]
    base, fast = rows["baseline"], rows["fast"]
    assert base.n == 3 and math.isclose(base.accuracy.mean, statistics.mean(base_acc))
    assert math.isclose(base.accuracy.high - base.accuracy.mean, t_half(base_acc))
    diffs = [a - b for a, b in zip(fast_acc, base_acc)]
    assert math.isclose(fast.accuracy_delta.mean, statistics.mean(diffs))
    assert math.isclose(fast.accuracy_delta.high - fast.accuracy_delta.mean, t_half(diffs))
    middle, low, high = log_ratio_t(base_time, fast_time)
    assert math.isclose(fast.speedup.mean, middle)
    assert math.isclose(fast.speedup.low, low) and math.isclose(fast.speedup.high, high)
    assert math.isclose(fast.speedup_to_target.mean, log_ratio_t([6.0, 7.0, 8.0], [4.0, 5.0, 3.0])[0])
    assert base.reached == 3 and rows["slow"].reached == 0
    slow_to_target = rows["slow"].speedup_to_target  # never reached: below base / its training time, 2 seeds
    assert math.isnan(slow_to_target.mean) and (slow_to_target.low, slow_to_target.high) == (0.0, math.inf)

    table = report.markdown
    assert f"| baseline | 3 | {81.0:.2f} ± {t_half(base_acc) * 100:.2f} |" in table
    expected_speedup = f"{middle:.2f}x [{low:.2f}, {high:.2f}]"
    assert f"| fast | 3 | {statistics.mean(fast_acc) * 100:.2f} ± {t_half(fast_acc) * 100:.2f} |" in table
    assert expected_speedup in table
    assert "| slow | 2 |" in table and "not reached" in table
    assert "Reproduce: `cadence-bench grid known.toml`" in table


def test_plots_and_files_are_written(report: Any) -> None:
    names = sorted(p.name for p in report.files)
    assert names == ["known-curves.png", "known-pareto.png", "report.md", "summary.csv"]
    for path in report.files:
        assert path.is_file() and path.stat().st_size > 0
    assert report.files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cards_get_results_only_between_the_markers(report: Any, tmp_path: Path) -> None:
    methods_root = tmp_path / "repo" / "packages" / "methods"
    before, after = "---\nname: Fast\ntldr: goes fast\n---\n\n# Fast\n\n## Results\n\n", "\n\ntail text\n"
    for name in ("fast", "other"):
        (methods_root / name).mkdir(parents=True)
        (methods_root / name / "card.md").write_text(f"{before}{MARK_START}\nold\n{MARK_END}{after}")
    written = write_cards(report.summaries, methods_root=methods_root, min_seeds=3)
    assert written == [methods_root / "fast" / "card.md"]
    text = written[0].read_text()
    assert text.startswith(before + MARK_START) and text.endswith(MARK_END + after) and "old" not in text
    assert "| fast | 3 |" in text and "| baseline | 3 |" in text and "| slow |" not in text
    assert "- runs: `cadence-bench grid known.toml`" in text
    assert (methods_root / "other" / "card.md").read_text() == f"{before}{MARK_START}\nold\n{MARK_END}{after}"

    index = write_index(
        report.summaries,
        methods_root=methods_root,
        index_path=tmp_path / "repo" / "method_cards" / "INDEX.md",
        plots=[p for p in report.files if p.suffix == ".png"],
    )
    content = index.read_text()
    assert "[Fast](../packages/methods/fast/card.md)" in content and "not measured" in content
    assert (
        index.parent / "known-pareto.png"
    ).is_file() and "![accuracy against training time](known-pareto.png)" in content


def test_cards_need_enough_seeds(report: Any, tmp_path: Path) -> None:
    root = tmp_path / "methods"
    (root / "fast").mkdir(parents=True)
    (root / "fast" / "card.md").write_text(f"x\n{MARK_START}\n{MARK_END}\n")
    assert write_cards(report.summaries, methods_root=root, min_seeds=4) == []


def test_a_card_without_markers_is_an_error(report: Any, tmp_path: Path) -> None:
    root = tmp_path / "methods"
    (root / "fast").mkdir(parents=True)
    (root / "fast" / "card.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="has no `<!-- results:start -->`"):
        write_cards(report.summaries, methods_root=root)


def test_pareto_front_keeps_the_undominated_points() -> None:
    points = [(10.0, 80.0), (8.0, 83.0), (20.0, 70.0), (12.0, 85.0), (9.0, 82.0)]
    assert pareto_front(points) == [1, 3]


# Throughput: model FLOP/s and the fraction of the device's peak ------------------------------
H100, FLOPS = "NVIDIA H100 80GB HBM3", 4e14  # every run below does 4e14 training FLOPs
GPU_RUNS = {(): [2.0, 2.5, 4.0], ("fast",): [1.0, 1.25, 2.0]}  # arm: train seconds per seed


def gpu_record(arm: tuple[str, ...], seed: int, train_s: float, device: str = H100, **params: str) -> RunRecord:
    """A finished run of `arm` on `device` in amp_bf16, the way a record line holds it (no MLflow, no training)."""
    spec = RunSpec(RECIPE, arm, seed)
    return RunRecord(
        run_id=f"{spec.run_name}-{device}",
        experiment="known",
        tags={**spec.tags(), "cadence.command": "cadence-bench grid known.toml"},
        params={"model": "tv/resnet20", "data": "digits", "duration": "2ep", "batch_size": "32"}
        | {"target_accuracy": "0.8", "device_name": device, "precision": "amp_bf16", **params},
        metrics={
            "final/accuracy": 0.8 + 0.01 * seed,
            "final/train_s": train_s,
            "final/flops": FLOPS,
            "final/samples_per_s": 1000 / train_s,
            "final/reached_target": 1.0,
            "final/time_to_target_s": train_s / 2,
        },
    )


def log_t(values: list[float]) -> tuple[float, float]:
    """The log-scale t-interval of positive values, computed here independently of `cadence_harness.stats`."""
    logs = np.log(values)
    factor = math.exp(t_half(list(logs)))
    return statistics.mean(values) / factor, statistics.mean(values) * factor


@pytest.mark.parametrize(
    ("device", "precision", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "amp_bf16", 989e12),
        ("NVIDIA H100 80GB HBM3", "fp32", 67e12),
        ("NVIDIA H100 PCIe", "amp_fp16", 756e12),
        ("NVIDIA H200", "amp_bf16", 989e12),
        ("NVIDIA A100-SXM4-80GB", "amp_bf16", 312e12),
        ("NVIDIA A100-PCIE-40GB", "fp32", 19.5e12),
        ("NVIDIA A100 80GB PCIe", "amp_bf16", 312e12),
        ("NVIDIA H100 NVL", "amp_bf16", None),  # another board, other clocks: not guessed
        ("NVIDIA H200 NVL", "amp_bf16", None),
        ("NVIDIA GH200 480GB", "amp_bf16", None),
        ("NVIDIA GeForce RTX 4090", "amp_bf16", None),
        ("AMD EPYC", "fp32", None),
        ("NVIDIA H100 80GB HBM3", "fp8", None),  # a precision the table does not hold
    ],
)
def test_device_peaks_are_looked_up_by_name_and_precision(device: str, precision: str, peak: float | None) -> None:
    assert peak_flops(device, precision) == peak
    assert peak_fraction(1e12, device, precision) == (None if peak is None else 1e12 / peak)


def test_rows_carry_model_flops_per_second_and_the_fraction_of_peak() -> None:
    runs = [gpu_record(arm, seed, t) for arm, times in GPU_RUNS.items() for seed, t in enumerate(times)]
    rows = {s.arm: s for s in summarize(runs)}
    for arm, times in GPU_RUNS.items():
        row, rates = rows["+".join(arm) or "baseline"], [FLOPS / t for t in times]
        assert math.isclose(row.flops_per_s.mean, statistics.mean(rates))
        assert np.allclose([row.flops_per_s.low, row.flops_per_s.high], log_t(rates))
        assert math.isclose(row.peak_fraction.mean, statistics.mean(rates) / 989e12)
    (cpu_row,) = summarize([gpu_record((), seed, 100.0, "AMD EPYC", precision="fp32") for seed in (0, 1)])
    assert cpu_row.flops_per_s.n == 2 and cpu_row.peak_fraction.n == 0

    base = rows["baseline"]
    table = format_table([base, rows["fast"]], throughput=True)
    assert "| model TFLOP/s | % of peak |" in table
    tflops, percent = base.flops_per_s.format(scale=1e-12, digits=3), base.peak_fraction.format(scale=100, digits=1)
    assert f"| {base.samples_per_s.format(digits=0)} | {tflops} | {percent} |" in table
    assert f"{statistics.mean([FLOPS / t for t in GPU_RUNS[()]]) / 989e12 * 100:.1f}" in percent
    assert "model TFLOP/s" not in format_table([base])  # a card's table stays as it was
    reach = base.time_to_target.format(digits=1)
    assert f"| {reach} (3/3) |" in table  # time to target: mean and interval over seeds, and how many reached it
    assert "NVIDIA H100 80GB HBM3 in amp_bf16, 989 TFLOP/s (NVIDIA H100 Tensor Core GPU datasheet" in peak_note([base])
    assert format_table([cpu_row], throughput=True).split("\n")[2].split(" | ")[11] == "—"
    assert "% of peak: — for AMD EPYC" in peak_note([cpu_row])


def test_a_fraction_of_peak_needs_every_runs_peak() -> None:
    known = [gpu_record((), 0, 2.0), gpu_record((), 1, 2.0, "NVIDIA H100 PCIe")]
    (row,) = summarize(known)
    assert math.isclose(row.peak_fraction.mean, (2e14 / 989e12 + 2e14 / 756e12) / 2)  # each run against its own card
    (row,) = summarize([*known, gpu_record((), 2, 2.0, "NVIDIA L4")])
    assert row.flops_per_s.n == 3 and row.peak_fraction.n == 0  # one unknown card: no fraction for the row


def test_the_report_and_index_show_throughput_and_the_cards_do_not(tmp_path: Path) -> None:
    runs = [gpu_record(arm, seed, t) for arm, times in GPU_RUNS.items() for seed, t in enumerate(times)]
    report = report_from_runs(runs, out_dir=tmp_path / "report", plots=False)
    assert "| model TFLOP/s | % of peak |" in report.markdown and "989 TFLOP/s" in report.markdown
    header = (tmp_path / "report" / "summary.csv").read_text().splitlines()[0]
    assert header.endswith(",samples_per_s,flops_per_s,peak_fraction")
    root = tmp_path / "repo" / "packages" / "methods"
    (root / "fast").mkdir(parents=True)
    (root / "fast" / "card.md").write_text(f"# Fast\n{MARK_START}\n{MARK_END}\n")
    (card,) = write_cards(report.summaries, methods_root=root, sections=report.sections, plots_link_prefix=None)
    assert "| fast | 3 |" in card.read_text() and "TFLOP/s" not in card.read_text()
    index = write_index(
        report.summaries, methods_root=root, index_path=tmp_path / "repo" / "INDEX.md", sections=report.sections
    )
    assert "| model TFLOP/s | % of peak |" in index.read_text() and "989 TFLOP/s" in index.read_text()


def _reaching(seed: int, train_s: float, reach: float | None) -> RunRecord:
    metrics = {"final/train_s": train_s, **({"final/time_to_target_s": reach} if reach is not None else {})}
    return RunRecord(f"r{seed}-{train_s}", "e", {"cadence.seed": str(seed)}, {"device_name": "cpu"}, metrics)


def test_a_seed_short_of_the_target_counts_as_a_bound_not_as_a_missing_seed() -> None:
    # The baseline reaches the target at 8 s on five seeds; the arm at 7.0 and 7.2 s on two and never on three
    # (trained 9 s each). Over the two that reached it, the arm read 1.13x; the three that did not say its time to
    # target is above 9 s, a ratio below 8/9: every seed counts, and only bounds are known.
    base = [_reaching(seed, 10.0, 8.0) for seed in range(5)]
    arm = [_reaching(0, 9.0, 7.0), _reaching(1, 9.0, 7.2), *(_reaching(seed, 9.0, None) for seed in (2, 3, 4))]
    interval = speedup_to_target(arm, base)
    assert interval is not None and interval.n == 5 and math.isnan(interval.mean)
    assert (interval.low, interval.high) == (0.0, math.inf)  # five seeds, some bounds: the sign test bounds nothing
    assert _target_ratio(interval, 5) == "—"
    known = speedup_to_target(arm[:2], base[:2])
    assert known is not None and known.mean == pytest.approx(math.sqrt(8 / 7.0 * 8 / 7.2)) and known.n == 2
    assert _target_ratio(known, 5).endswith(" n=2")
    eight = [_reaching(seed, 10.0, 8.0) for seed in range(8)]
    short = speedup_to_target([_reaching(seed, 9.0, None if seed else 7.0) for seed in range(8)], eight)
    assert short is not None and short.low == 0.0 and short.high == pytest.approx(8 / 7.0)  # the largest bound
    assert _target_ratio(short, 8) == "[unbounded, 1.14x] n=8 (bounds: a seed fell short of the target)"
    assert speedup_to_target([_reaching(0, 9.0, None)], [_reaching(0, 9.0, None)]) is None
