"""SWA's functions against torch.optim.swa_utils: the average, SWALR, update_bn; batches replayed and split."""

from __future__ import annotations

import copy

import pytest
import torch
from cadence_swa import (
    average_weights,
    check_swa_args,
    load_weights,
    recompute_bn_statistics,
    swa_learning_rate,
    swa_weights,
    training_batches,
    use_learning_rates,
)
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from cadence.testing import TinyCNN, assert_same_tensors


def _samples(count: int) -> list[nn.Module]:
    torch.manual_seed(0)
    return [TinyCNN() for _ in range(count)]


def test_the_average_is_the_mean_of_the_samples_and_torchs_averaged_model() -> None:
    samples = _samples(5)
    averaged = swa_weights(samples[0])
    reference = AveragedModel(samples[0])
    reference.update_parameters(samples[0])
    for n, model in enumerate(samples[1:], start=1):
        average_weights(averaged, model, num_averaged=n)
        reference.update_parameters(model)
    assert set(averaged) == {name for name, _ in samples[0].named_parameters()}  # parameters only
    for name, value in averaged.items():
        mean = torch.stack([dict(m.named_parameters())[name].detach().double() for m in samples]).mean(0)
        torch.testing.assert_close(value.double(), mean, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(value, dict(reference.module.named_parameters())[name], rtol=1e-6, atol=1e-7)


def test_frozen_parameters_are_not_averaged_and_load_weights_keeps_the_parameter_objects() -> None:
    model, other = _samples(2)
    model.head.weight.requires_grad_(False)
    averaged = swa_weights(other)
    del averaged["head.weight"]
    params = list(model.parameters())
    load_weights(model, averaged)
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert torch.equal(model.head.bias, other.head.bias) and not torch.equal(model.head.weight, other.head.weight)


@pytest.mark.parametrize("strategy", ["linear", "cos"])
@pytest.mark.parametrize("anneal_steps", [1, 3, 10])
def test_swa_learning_rate_is_swalr_in_closed_form(strategy: str, anneal_steps: int) -> None:
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.4)
    scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=anneal_steps, anneal_strategy=strategy)
    for updates in range(0, 14):
        expected = optimizer.param_groups[0]["lr"]
        assert swa_learning_rate(0.4, 0.05, updates, anneal_steps, strategy) == pytest.approx(expected, rel=1e-12)
        optimizer.step()
        scheduler.step()
    assert swa_learning_rate(0.4, None, 7) == 0.4  # Composer: the rate the window started with


def test_use_learning_rates_steps_with_its_rates_and_hides_them_from_the_scheduler() -> None:
    weight = torch.ones(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)  # chainable: reads group["lr"]
    wanted: list[float] | None = [0.1]
    handles = use_learning_rates(optimizer, lambda: wanted)
    steps = []
    for _ in range(3):
        before = weight.item()
        weight.grad = torch.ones(1)
        optimizer.step()
        steps.append(before - weight.item())
        scheduler.step()
    wanted = None  # the groups' own rate again
    weight.grad = torch.ones(1)
    before = weight.item()
    optimizer.step()
    assert steps == pytest.approx([0.1] * 3) and before - weight.item() == pytest.approx(0.125)
    for handle in handles:
        handle.remove()
    assert optimizer.param_groups[0]["lr"] == 0.125 and not optimizer._optimizer_step_pre_hooks


def _loader(num: int = 12, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.rand(num, 3, 8, 8, generator=generator) * 3, torch.arange(num) % 4)
    return DataLoader(data, batch_size=batch_size)


def test_bn_statistics_equal_update_bn_on_a_copy() -> None:
    model = _samples(1)[0]
    model.eval()
    norm = model.features[1]
    norm.momentum = 0.3
    reference = copy.deepcopy(model)
    seen = recompute_bn_statistics(model, training_batches(_loader(), 0, torch.device("cpu")), lambda b: model(b[0]))
    update_bn(_loader(), reference)
    assert seen == 3 and norm.momentum == 0.3 and not model.training  # restored
    assert_same_tensors(dict(model.named_buffers()), dict(reference.named_buffers()))
    assert int(norm.num_batches_tracked) == 3 and not torch.equal(norm.running_var, torch.ones(8))


def test_microbatches_are_the_batches_update_bn_would_see_split() -> None:
    model, reference = _samples(1)[0], copy.deepcopy(_samples(1)[0])
    batches = training_batches(_loader(12, 4), 0, torch.device("cpu"), microbatch_size=3)  # 3 + 1 per batch
    assert recompute_bn_statistics(model, batches, lambda b: model(b[0])) == 6
    split = [x[i : i + 3] for x, _ in _loader(12, 4) for i in (0, 3)]
    update_bn(split, reference)
    assert_same_tensors(dict(model.named_buffers()), dict(reference.named_buffers()))


def test_dict_batches_are_moved_and_split_every_per_sample_tensor() -> None:
    batch = {"x": torch.rand(5, 2), "y": torch.arange(5), "scale": torch.tensor(2.0), "name": "b"}
    parts = list(training_batches([batch], 0, torch.device("cpu"), microbatch_size=2))
    assert [p["x"].shape[0] for p in parts] == [2, 2, 1] and all(p["name"] == "b" for p in parts)
    assert torch.equal(torch.cat([p["y"] for p in parts]), batch["y"]) and parts[2]["scale"] is batch["scale"]


class ResumedSampler(Sampler[int]):
    """Like the trainer's sampler: per-epoch order, and a start position after a mid-epoch resume."""

    def __init__(self, n: int):
        self.n, self.epoch, self.start = n, 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch)).tolist()
        return iter(order[self.start :])

    def __len__(self) -> int:
        return self.n - self.start


def test_batches_replay_the_whole_epoch_without_touching_the_training_loader() -> None:
    data = TensorDataset(torch.arange(10.0))
    loader = DataLoader(data, batch_size=3, sampler=ResumedSampler(10))
    loader.sampler.set_epoch(2, start=6)  # a run resumed after two batches of epoch 2
    training = iter(loader)
    next(training)
    replayed = torch.cat([b[0] for b in training_batches(loader, 2, torch.device("cpu"))])
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(2)).double()
    assert torch.equal(replayed.double(), expected)
    assert (loader.sampler.epoch, loader.sampler.start) == (2, 6)
    assert torch.cat([b[0] for b in training]).tolist() == expected[9:].tolist()  # its pass continues


def test_no_batchnorm_means_no_pass_and_an_empty_pass_is_refused() -> None:
    iterated = []
    assert recompute_bn_statistics(nn.Linear(2, 2), (iterated.append(1) for _ in range(2))) == 0 and not iterated
    with pytest.raises(ValueError, match="yielded nothing"):
        recompute_bn_statistics(TinyCNN(), [])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"anneal_strategy": "cosin"}, ValueError, "`anneal_strategy`='cosin' must be one of .*did you mean 'cosine'"),
        ({"anneal_steps": 0}, ValueError, "`anneal_steps`=0 must be an int >= 1"),
        ({"anneal_steps": 2.0}, TypeError, "`anneal_steps`"),
        ({"swa_lr": -0.1, "schedule_swa_lr": True}, ValueError, "`swa_lr`=-0.1 must be a finite number >= 0"),
        ({"swa_lr": 0.05}, ValueError, "`swa_lr`=0.05 takes effect only with `schedule_swa_lr`=True"),
        ({"schedule_swa_lr": "yes"}, TypeError, "`schedule_swa_lr`='yes' must be True or False"),
    ],
)
def test_bad_hyperparameters_are_refused_naming_them(kwargs: dict, error: type, match: str) -> None:
    args = {"schedule_swa_lr": False, "anneal_strategy": "linear", "anneal_steps": 10, "swa_lr": None, **kwargs}
    with pytest.raises(error, match=match):
        check_swa_args(**args)
    assert check_swa_args(True, "cosine", 3, 0.1) == "cos"
