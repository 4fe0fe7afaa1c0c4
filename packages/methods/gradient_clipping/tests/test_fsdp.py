"""Composer's `fsdp_enabled`: under FSDP2 the gradients are DTensors and every clipping type computes the
global result from the shards (two processes: packages/core/tests/test_fsdp_multiprocess.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as torch_dist
from cadence_gradient_clipping import apply_gradient_clipping
from torch import nn


@pytest.fixture
def process_group() -> Iterator[None]:
    torch_dist.init_process_group("gloo", store=torch_dist.HashStore(), rank=0, world_size=1)
    yield
    torch_dist.destroy_process_group()


@pytest.mark.parametrize(("clipping_type", "threshold"), [("norm", 0.1), ("value", 0.01), ("adaptive", 0.01)])
@pytest.mark.parametrize("fsdp_enabled", [True, False])
def test_clipping_sharded_gradients_equals_clipping_whole_ones(
    process_group: None, clipping_type: str, threshold: float, fsdp_enabled: bool
) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    whole = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    sharded = copy.deepcopy(whole)
    fully_shard(sharded)
    inputs = torch.randn(4, 6)
    for model in (whole, sharded):
        model(inputs).pow(2).sum().backward()
    assert all(isinstance(p.grad, DTensor) for p in sharded.parameters())
    apply_gradient_clipping(whole, clipping_type, threshold)
    apply_gradient_clipping(sharded, clipping_type, threshold, fsdp_enabled=fsdp_enabled)
    for (name, expected), got in zip(whole.named_parameters(), sharded.parameters()):
        torch.testing.assert_close(got.grad.full_tensor(), expected.grad, rtol=0, atol=1e-7, msg=name)
        assert not torch.equal(expected.grad, torch.zeros_like(expected.grad))


def test_fsdp_enabled_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="fsdp_enabled"):
        apply_gradient_clipping(nn.Linear(2, 2), "norm", 1.0, fsdp_enabled="yes")  # type: ignore[arg-type]
