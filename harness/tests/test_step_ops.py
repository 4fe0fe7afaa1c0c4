"""`benchmarks.step_ops`: torch operations per training step, counted by phase of the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Classifier, Trainer
from cadence_harness.benchmarks.step_ops import PHASES, OpCounter, count_recipe


def _count(layers: int, foreach: bool, steps: int = 4, skip: int = 2) -> OpCounter:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    body = [m for _ in range(layers) for m in (torch.nn.Linear(8, 8), torch.nn.ReLU())]
    model = Classifier(torch.nn.Sequential(*body, torch.nn.Linear(8, 2)), 2)
    counter = OpCounter(steps=steps, skip=skip)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=4),
        eval_dataloader=DataLoader(data, batch_size=32),
        eval_interval="3ba",  # an evaluation inside the window: not counted
        max_duration=f"{skip + steps + 1}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=foreach),
        callbacks=[counter],
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    trainer.close()
    return counter


def test_each_phase_gets_its_own_operations_and_only_the_window_counts() -> None:
    counter = _count(layers=1, foreach=False)
    assert counter.counted_steps == 4
    per_step = counter.per_step()
    assert list(per_step) == list(PHASES)
    # two Linear layers, four steps; the evaluation after batch 3 (two batches) would have added 4 more
    assert counter.ops["forward"]["aten::addmm"] == 2 * 4
    assert counter.ops["backward"]["aten::threshold_backward"] == 4  # the ReLU's gradient
    assert "aten::addmm" not in counter.ops["backward"] and "aten::mm" not in counter.ops["forward"]
    assert counter.ops["loss"]["aten::_log_softmax"] == 4
    assert all(value == int(value) for value in per_step.values())  # the same work in every counted step


def test_the_optimizer_row_grows_with_the_parameters_unless_the_optimizer_is_multi_tensor() -> None:
    small, large = _count(layers=1, foreach=False).per_step(), _count(layers=4, foreach=False).per_step()
    assert large["optimizer and batch-end methods"] > small["optimizer and batch-end methods"] + 12  # 6 more tensors
    small_foreach, large_foreach = _count(layers=1, foreach=True).per_step(), _count(layers=4, foreach=True).per_step()
    assert large_foreach["optimizer and batch-end methods"] == small_foreach["optimizer and batch-end methods"]
    assert large["forward"] > small["forward"]


def test_the_counter_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match="steps=0 must be >= 1"):
        OpCounter(steps=0)


def test_a_recipe_run_counts_its_loader_model_and_optimizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jpeg_archive: Any
) -> None:
    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path / "cache"))
    data = jpeg_archive(tmp_path / "data", train=96, test=32)  # the real file's layout: counts do not need its pixels
    counter = count_recipe("cifar10_fast", steps=5, skip=1, data_dir=str(data), batch_size=8)
    per_step = counter.per_step()
    assert counter.counted_steps == 5
    assert counter.ops["forward"]["aten::convolution"] == 7 * 5  # the whitening conv and six more
    assert counter.ops["loader"]["aten::index_select"] >= 2 * 5  # the one-copy gather and the labels
    assert per_step["loader"] <= 20  # the alternating flip and translate gathered in one copy (it was 42)
