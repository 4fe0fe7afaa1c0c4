"""The augmentation benchmark's code path at a tiny size with one repeat, so that it cannot rot (it times nothing)."""

from __future__ import annotations

import math

import pytest
import torch

from cadence_harness.benchmarks import augment


def test_rows_are_measured_and_printed_with_their_targets(capsys: pytest.CaptureFixture[str]) -> None:
    shapes = ((2, 3, 8, 8), (1, 3, 12, 12))
    rows = augment.batched_vs_per_image(repeats=1, shapes=shapes, clock="cpu")
    assert [(method, shape) for method, shape, *_ in rows] == [
        (method, "x".join(map(str, shape))) for method in ("randaugment", "augmix") for shape in shapes
    ]
    assert all(loop is not None and loop > 0 and batched is not None and batched > 0 for *_, loop, batched in rows)
    augment.print_table(rows)
    printed = capsys.readouterr().out
    assert "PIL per-image" in printed and "vs loop" in printed and printed.count("randaugment") == 2
    assert "avx2" in augment.cpu_description()


def test_the_pil_reference_follows_composer_on_uint8_batches() -> None:
    pytest.importorskip("PIL")
    np = pytest.importorskip("numpy")
    images = torch.randint(0, 256, (3, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for method in ("randaugment", "augmix"):
        out = augment.pil_per_image(method)(images, np.random.RandomState(0))
        again = augment.pil_per_image(method)(images, np.random.RandomState(0))
        assert out.shape == images.shape and out.dtype == torch.uint8 and torch.equal(out, again)
        assert not torch.equal(out, images)
    assert len(augment._pil_operations()) == 13


def test_a_cost_line_splits_per_call_from_per_sample_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert augment._line((8, 64, 256), (1.0 + 8 * 0.02, 1.0 + 64 * 0.02, 1.0 + 256 * 0.02)) == pytest.approx(
        (1.0, 0.02)
    )
    lines = augment.cost_lines(repeats=1, sizes=(1, 2, 4), image=(3, 8, 8), clock="cpu")
    assert [method for method, *_ in lines] == ["randaugment", "augmix"]
    assert all(math.isfinite(fixed) and math.isfinite(per_sample) for _, (fixed, per_sample), _ in lines)
    augment.print_cost_lines(lines, (1, 2, 4))  # a timing this small may come out at any sign: nothing asserted on it
    printed = capsys.readouterr().out
    assert "per call" in printed and printed.count("µs per sample") >= 2
    augment.print_cost_lines([("randaugment", (1.0, -0.5), (0.0, 100.0))], (1, 2, 4))
    noisy = capsys.readouterr().out
    assert "below this run's noise" in noisy and "at most" not in noisy
