"""SAMOptimizer in a hand-written loop: rho 0, the perturbation, the interval, the state, the grad scaler."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from cadence_sam import SAMOptimizer
from torch import nn

DATA = torch.Generator().manual_seed(0)
INPUTS, LABELS = torch.randn(6, 8, 10, generator=DATA), torch.randint(0, 3, (6, 8), generator=DATA)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 12), nn.Tanh(), nn.Linear(12, 3))


def _closure(model: nn.Module, step: int, calls: list | None = None) -> Callable[..., torch.Tensor]:
    def closure(sync: bool = True) -> torch.Tensor:
        if calls is not None:
            calls.append((step, sync, [p.detach().clone() for p in model.parameters()]))
        loss = nn.functional.cross_entropy(model(INPUTS[step]), LABELS[step])
        loss.backward()
        return loss.detach()

    return closure


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: range, calls: list | None = None) -> list:
    losses = []
    for step in steps:
        optimizer.zero_grad()
        losses.append(optimizer.step(_closure(model, step, calls)))
    return losses


def _reference_sam(model: nn.Module, base: torch.optim.Optimizer, step: int, rho: float, eps: float = 1e-12) -> None:
    """Composer's formula (e = g * rho / (||g|| + eps), second gradient at w + e), w restored by copy."""
    base.zero_grad()
    _closure(model, step)()
    params = [p for p in model.parameters()]
    norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in params]), p="fro")
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.add_(p.grad * (rho / (norm + eps)))
    base.zero_grad()
    _closure(model, step)()
    with torch.no_grad():
        for p, w in zip(params, saved):
            p.copy_(w)
    base.step()


def test_rho_zero_is_the_base_optimizer_step_exactly() -> None:
    plain, sam = _model(), _model()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    sam_opt = SAMOptimizer(torch.optim.SGD(sam.parameters(), lr=0.1, momentum=0.9), rho=0.0)
    assert _train(plain, plain_opt, range(6)) == _train(sam, sam_opt, range(6))
    for a, b in zip(plain.parameters(), sam.parameters()):
        assert torch.equal(a, b)


def test_equals_the_reference_formula_bitwise() -> None:
    reference, ours = _model(), _model()
    base = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        _reference_sam(reference, base, step, rho=0.2)
    _train(ours, SAMOptimizer(torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9), rho=0.2), range(4))
    for a, b in zip(reference.parameters(), ours.parameters()):
        assert torch.equal(a, b)


def test_the_perturbation_has_norm_rho_along_the_gradient_and_is_undone_exactly() -> None:
    model, calls = _model(), []
    optimizer = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), rho=0.05)
    before = [p.detach().clone() for p in model.parameters()]
    _closure(model, 0)()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters()])
    optimizer.zero_grad()
    loss = optimizer.step(_closure(model, 0, calls))
    (_, first_sync, at_w), (_, second_sync, at_w_plus_e) = calls
    assert (first_sync, second_sync) == (False, True)
    e = torch.cat([(b - a).flatten() for a, b in zip(at_w, at_w_plus_e)])
    assert float(e.norm()) == pytest.approx(0.05, rel=1e-5)
    assert torch.allclose(e / e.norm(), gradient / gradient.norm(), atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # lr 0: back to w bit for bit
    assert torch.equal(loss, nn.functional.cross_entropy(model(INPUTS[0]), LABELS[0]).detach())  # the loss at w


@pytest.mark.parametrize("interval", [1, 3])
def test_interval_alternates_sam_and_plain_steps(interval: int) -> None:
    model, calls = _model(), []
    _train(model, SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), interval=interval), range(6), calls)
    per_step = [[sync for step, sync, _ in calls if step == s] for s in range(6)]
    sam_step = [False, True]
    assert per_step == [sam_step if (s + 1) % interval == 0 else [True] for s in range(6)]


def test_the_second_evaluation_leaves_the_buffers_as_the_first_left_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 12), nn.BatchNorm1d(12), nn.Linear(12, 3))
    optimizer = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.5, model=model)
    reference = nn.BatchNorm1d(12)
    reference.load_state_dict(model[1].state_dict())
    reference(model[0](INPUTS[0]).detach())  # one update, at w
    optimizer.step(_closure(model, 0))
    assert_buffers = [(b, r) for b, r in zip(model[1].buffers(), reference.buffers())]
    assert all(torch.equal(b, r) for b, r in assert_buffers) and int(model[1].num_batches_tracked) == 1


def test_closures_without_a_sync_argument_work() -> None:
    model = _model()
    optimizer = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))

    def closure() -> torch.Tensor:
        loss = nn.functional.cross_entropy(model(INPUTS[0]), LABELS[0])
        loss.backward()
        return loss

    assert torch.isfinite(optimizer.step(closure))


def test_groups_and_state_are_the_base_optimizers() -> None:
    model = _model()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sam = SAMOptimizer(base)
    assert sam.param_groups is base.param_groups and sam.state is base.state
    schedule = torch.optim.lr_scheduler.LambdaLR(sam, lambda step: 0.5**step)  # Composer's test: lr stays in sync
    _train(model, sam, range(2))
    schedule.step()
    assert base.param_groups[0]["lr"] == 0.05 and base.param_groups[0]["initial_lr"] == 0.1
    sam.load_state_dict(sam.state_dict())
    assert sam.param_groups is base.param_groups and sam.state is base.state
    assert set(sam.state_dict()) == {"state", "param_groups", "sam"} and sam.state_dict()["sam"] == {"global_step": 2}


@pytest.mark.parametrize("stop", [1, 2, 3])
def test_state_dict_resumes_exactly_around_sam_steps(stop: int) -> None:
    whole = _model()
    _train(whole, SAMOptimizer(torch.optim.SGD(whole.parameters(), lr=0.1, momentum=0.9), interval=2), range(5))
    first = _model()
    optimizer = SAMOptimizer(torch.optim.SGD(first.parameters(), lr=0.1, momentum=0.9), interval=2)
    _train(first, optimizer, range(stop))
    saved = optimizer.state_dict()
    resumed = _model()
    resumed.load_state_dict(first.state_dict())
    fresh = SAMOptimizer(torch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9), interval=2)
    fresh.load_state_dict(saved)
    assert fresh.global_step == stop
    _train(resumed, fresh, range(stop, 5))
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def _scaled_closure(model: nn.Module, optimizer: SAMOptimizer, scaler: torch.amp.GradScaler) -> Callable:
    def closure(sync: bool = True) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(INPUTS[0]), LABELS[0])
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        return loss.detach()

    return closure


def test_with_a_grad_scaler_an_overflow_skips_the_step_and_backs_off() -> None:
    model = _model()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # fp16 backward overflows at this scale
    optimizer = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), grad_scaler=scaler)
    before = [p.detach().clone() for p in model.parameters()]
    loss = optimizer.step(_scaled_closure(model, optimizer, scaler))
    assert torch.isfinite(loss) and scaler.get_scale() == 2.0**39
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_with_a_grad_scaler_rho_zero_is_the_scaled_base_step() -> None:
    plain, sam = _model(), _model()
    plain_opt, plain_scaler = torch.optim.SGD(plain.parameters(), lr=0.1), torch.amp.GradScaler("cpu")
    sam_scaler = torch.amp.GradScaler("cpu")
    sam_opt = SAMOptimizer(torch.optim.SGD(sam.parameters(), lr=0.1), rho=0.0, grad_scaler=sam_scaler)
    for _ in range(3):
        plain_opt.zero_grad()
        _scaled_closure(plain, plain_opt, plain_scaler)()  # unscales, as the trainer does
        plain_scaler.step(plain_opt)
        plain_scaler.update()
        sam_opt.zero_grad()
        sam_opt.step(_scaled_closure(sam, sam_opt, sam_scaler))
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), sam.parameters()))
    assert sam_scaler.get_scale() == plain_scaler.get_scale()


def test_bad_arguments_are_refused_naming_them() -> None:
    base = torch.optim.SGD(_model().parameters(), lr=0.1)
    for kwargs, name in [
        ({"rho": -0.1}, "rho"),
        ({"rho": float("nan")}, "rho"),
        ({"epsilon": 0}, "epsilon"),
        ({"interval": 0}, "interval"),
        ({"interval": 1.5}, "interval"),
        ({"interval": True}, "interval"),
    ]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            SAMOptimizer(base, **kwargs)
    with pytest.raises(TypeError, match="`base_optimizer`"):
        SAMOptimizer(SAMOptimizer(base))
    with pytest.raises(ValueError, match="needs a closure"):
        SAMOptimizer(base).step()
