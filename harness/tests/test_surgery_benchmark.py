"""The surgery benchmark's code path on a tiny model with one repeat, so that it cannot rot (it times nothing)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.ops import SurgeryMethod
from cadence.registry import registry
from cadence_harness.benchmarks import surgery


def test_every_installed_surgery_method_is_applied_timed_and_printed(capsys: pytest.CaptureFixture[str]) -> None:
    methods = surgery.surgery_methods()
    installed = {name for name, info in registry().methods.items() if issubclass(info.algorithm, SurgeryMethod)}
    assert set(methods) == installed and "mixup" not in methods
    torch.manual_seed(0)
    plain = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )  # fmt: skip
    variants = surgery.build_variants(plain, methods)
    assert [v.name for v in variants] == ["plain", *methods] and variants[0].model is plain
    assert all(v.model is not plain for v in variants[1:])  # each surgery on its own copy
    timed = {v.name for v in variants if v.model is not None}
    if "blurpool" in methods:
        assert "blurpool" in timed  # the tiny model has a strided convolution and a max-pool
    shape = (2, 3, 16, 16)
    medians = surgery.measure(variants, shape, repeats=1)
    timings = {name: value for name, value in medians.items() if not isinstance(value, str)}
    assert set(medians) <= {v.name for v in variants} and set(timings) <= timed and "plain" in timings
    assert all(0 < forward <= step for forward, step in timings.values())
    if "ghost_batchnorm" in timed:  # its default ghost batches of 32 hold the whole batch of 2: refused, not timed
        assert medians["ghost_batchnorm"].startswith("not timed at this size: GhostBatchNorm")
    surgery.print_table(variants, shape, medians)
    printed = capsys.readouterr().out
    assert "training step on 2x3x16x16 images" in printed and "1.000x" in printed
    assert all(name in printed for name in methods) and surgery.cpu_name()
