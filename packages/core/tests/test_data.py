"""ResumableSampler and loader preparation: per-epoch order, sharding, O(1) mid-epoch resume."""

from __future__ import annotations

import functools
import operator

import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence._resumable_loader import ResumableSampler, prepare_loader


def test_order_depends_only_on_seed_and_epoch() -> None:
    a, b = ResumableSampler(10, shuffle=True, seed=3), ResumableSampler(10, shuffle=True, seed=3)
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a) == list(b) and sorted(a) == list(range(10))
    b.set_epoch(3)
    assert list(a) != list(b)


def test_ranks_take_strided_slices_of_one_global_order() -> None:
    whole = ResumableSampler(10, shuffle=True, seed=1)
    shards = [ResumableSampler(10, shuffle=True, seed=1, rank=r, world_size=3) for r in range(3)]
    order = list(whole)
    padded = order + order[:2]  # 10 samples over 3 ranks: 4 each, the first 2 repeated
    assert [list(s) for s in shards] == [padded[r::3] for r in range(3)]
    evaluation = [ResumableSampler(10, shuffle=False, seed=1, rank=r, world_size=3, pad=False) for r in range(3)]
    assert sorted(i for s in evaluation for i in s) == list(range(10))  # no duplicates for exact metrics


def test_resume_skips_in_constant_time() -> None:
    sampler = ResumableSampler(1_000_000, shuffle=True, seed=0)
    sampler.set_epoch(5)
    full = list(sampler)
    sampler.set_epoch(5, start=999_990)
    assert list(sampler) == full[999_990:] and len(sampler) == 10


def test_prepared_loader_resumes_mid_epoch_and_leaves_the_global_rng_alone() -> None:
    dataset = TensorDataset(torch.arange(20))
    plan = prepare_loader(DataLoader(dataset, batch_size=4, shuffle=True), seed=9, rank=0, world_size=1, train=True)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    epoch = [b[0].tolist() for b in plan.epoch(1)]
    assert torch.equal(torch.get_rng_state(), state)  # starting an epoch drew nothing from the global RNG
    assert [b[0].tolist() for b in plan.epoch(1, skip_batches=3)] == epoch[3:]
    assert sorted(functools.reduce(operator.iadd, epoch, [])) == list(range(20)) and len(plan) == 5


def test_plain_iterables_are_used_as_they_are() -> None:
    batches = [(torch.zeros(2), torch.zeros(2))] * 3
    plan = prepare_loader(batches, seed=0, rank=0, world_size=1, train=True)
    assert plan.sampler is None and len(list(plan.epoch(0, skip_batches=1))) == 2
