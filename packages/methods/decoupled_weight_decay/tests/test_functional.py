"""Decoupled weight decay: the per-step decay, Composer's optimizers, and the property that defines it."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from cadence_decoupled_weight_decay import DecoupledAdamW, DecoupledSGDW, apply_decoupled_weight_decay
from torch import nn

DATA = torch.Generator().manual_seed(0)
INPUTS, LABELS = torch.randn(5, 8, 6, generator=DATA), torch.randint(0, 3, (5, 8), generator=DATA)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 7), nn.Tanh(), nn.Linear(7, 3))


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 5, zero_grads: bool = False) -> None:
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / 6)))
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(INPUTS[step]), LABELS[step])
        (loss * 0 if zero_grads else loss).backward()
        optimizer.step()
        schedule.step()


def _param(value: float, grad: float | None = 1.0) -> nn.Parameter:
    param = nn.Parameter(torch.full((3,), value))
    param.grad = None if grad is None else torch.full((3,), grad)
    return param


def test_the_decay_per_step_follows_lr_over_initial_lr() -> None:
    decayed, untouched = _param(2.0), _param(2.0, grad=None)
    groups = [{"params": [decayed, untouched], "lr": 0.05, "initial_lr": 0.1, "weight_decay": 0.01}]
    apply_decoupled_weight_decay(groups)
    assert torch.equal(decayed, torch.full((3,), 2.0 * (1 - 0.5 * 0.01))) and torch.equal(
        untouched, torch.full((3,), 2.0)
    )
    fresh = {"params": [_param(1.0)], "lr": 0.3}  # no initial_lr yet: this lr is the initial one
    apply_decoupled_weight_decay([fresh], weight_decay=0.1)
    assert fresh["initial_lr"] == 0.3 and torch.equal(fresh["params"][0], torch.full((3,), 0.9))
    zero = {"params": [_param(1.0)], "lr": 0.0, "initial_lr": 0.0, "weight_decay": 0.1}  # Composer: decay by wd
    apply_decoupled_weight_decay([zero])
    assert torch.equal(zero["params"][0], torch.full((3,), 0.9))


def test_only_if_finite_skips_the_decay_when_a_gradient_is_not() -> None:
    groups = [{"params": [_param(1.0), _param(1.0, grad=float("inf"))], "lr": 0.1, "weight_decay": 0.5}]
    apply_decoupled_weight_decay(groups, only_if_finite=True)
    assert all(torch.equal(p, torch.ones(3)) for p in groups[0]["params"])
    gated, plain = _param(1.0), _param(1.0)
    apply_decoupled_weight_decay([{"params": [gated], "lr": 0.1, "weight_decay": 0.01}], only_if_finite=True)
    apply_decoupled_weight_decay([{"params": [plain], "lr": 0.1, "weight_decay": 0.01}])
    assert torch.equal(gated, plain) and not torch.equal(plain, torch.ones(3))


def _composer_sgdw(model: nn.Module, lr: float, momentum: float, weight_decay: float, nesterov: bool) -> Callable:
    """Composer's DecoupledSGDW.sgdw (composer/optim/decoupled_weight_decay.py), transcribed, as a step."""
    buffers: dict[nn.Parameter, torch.Tensor] = {}

    @torch.no_grad()
    def step(current_lr: float) -> None:
        for param in model.parameters():
            d_p = param.grad
            if momentum != 0:
                buf = buffers.get(param)
                buffers[param] = buf = d_p.clone() if buf is None else buf.mul_(momentum).add_(d_p)
                d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
            param.mul_(1 - (current_lr / lr) * weight_decay)
            param.add_(d_p, alpha=-current_lr)

    return step


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgdw_is_composers_bitwise(nesterov: bool) -> None:
    ours, theirs = _model(), _model()
    _train(ours, DecoupledSGDW(ours.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=nesterov))
    step = _composer_sgdw(theirs, 0.1, 0.9, 1e-2, nesterov)
    for index in range(5):
        theirs.zero_grad()
        nn.functional.cross_entropy(theirs(INPUTS[index]), LABELS[index]).backward()
        step(0.1 * 0.5 * (1 + math.cos(math.pi * index / 6)))
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


def test_adamw_is_the_decay_then_torchs_adam() -> None:
    ours, theirs = _model(), _model()
    _train(ours, DecoupledAdamW(ours.parameters(), lr=0.01, weight_decay=1e-3))
    adam = torch.optim.Adam(theirs.parameters(), lr=0.01, betas=(0.9, 0.95), eps=1e-8)
    schedule = torch.optim.lr_scheduler.LambdaLR(adam, lambda step: 0.5 * (1 + math.cos(math.pi * step / 6)))
    for index in range(5):
        adam.zero_grad()
        nn.functional.cross_entropy(theirs(INPUTS[index]), LABELS[index]).backward()
        apply_decoupled_weight_decay(adam.param_groups, 1e-3)
        adam.step()
        schedule.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("make", [DecoupledSGDW, DecoupledAdamW], ids=["sgdw", "adamw"])
def test_changing_only_the_base_lr_leaves_the_decay_per_step_unchanged(make: type) -> None:
    runs = {}
    for lr in (0.1, 0.01):  # the same schedule shape (cosine); zero gradients: only the decay moves the weights
        model = _model()
        _train(model, make(model.parameters(), lr=lr, weight_decay=1e-2), zero_grads=True)
        runs[lr] = [p.detach().clone() for p in model.parameters()]
    multiplier = math.prod(1 - 1e-2 * 0.5 * (1 + math.cos(math.pi * step / 6)) for step in range(5))
    for slow, fast, start in zip(runs[0.01], runs[0.1], _model().parameters()):
        torch.testing.assert_close(slow, fast, rtol=1e-6, atol=0)
        torch.testing.assert_close(fast, start.detach() * multiplier, rtol=1e-6, atol=0)
    coupled = {}  # torch's AdamW decays by lr * weight_decay: a 10x smaller lr decays 10x less
    for lr in (0.1, 0.01):
        model = _model()
        _train(model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-1), zero_grads=True)
        coupled[lr] = next(model.parameters()).detach().clone()
    assert not torch.allclose(coupled[0.1], coupled[0.01], rtol=1e-3)


def test_groups_keep_their_own_weight_decay() -> None:
    model = _model()
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    optimizer = DecoupledSGDW([{"params": weights}, {"params": biases, "weight_decay": 0.0}], lr=0.1, weight_decay=0.5)
    before = [p.detach().clone() for p in biases]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, biases))
    assert [g["weight_decay"] for g in optimizer.state_dict()["param_groups"]] == [0.5, 0.0]


def test_step_runs_the_closure_first_and_returns_its_loss() -> None:
    model = _model()
    optimizer = DecoupledSGDW(model.parameters(), lr=0.1, weight_decay=1e-3)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(INPUTS[0]), LABELS[0])
        loss.backward()
        return loss

    assert torch.isfinite(optimizer.step(closure))


def test_a_grad_scaler_that_skips_the_step_skips_the_decay() -> None:
    model = _model()
    optimizer = DecoupledSGDW(model.parameters(), lr=0.1, weight_decay=0.5)
    scaler = torch.amp.GradScaler("cpu")
    before = [p.detach().clone() for p in model.parameters()]
    scaler.scale(model(INPUTS[0]).sum() * float("inf")).backward()
    scaler.step(optimizer)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("make", [DecoupledSGDW, DecoupledAdamW], ids=["sgdw", "adamw"])
@pytest.mark.parametrize("weight_decay", [-1e-4, 1.0, float("inf"), True, "1e-4"])
def test_bad_weight_decay_is_refused_naming_it(make: type, weight_decay: object) -> None:
    with pytest.raises(ValueError, match="`weight_decay`"):
        make(_model().parameters(), lr=0.1, weight_decay=weight_decay)


def test_the_functions_weight_decay_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"`weight_decay`=-0\.1"):
        apply_decoupled_weight_decay([], weight_decay=-0.1)
