"""compute_ema, ema_weights, swap_weights: Composer's formula bit for bit, the closed form, exact swaps."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from cadence_ema import compute_ema, ema_weights, smoothing_from_half_life, swap_weights
from cadence_ema import functional as ema_functional
from torch import nn

from cadence.testing import assert_same_tensors, tiny_image_classifier


def _model(seed: int) -> nn.Module:
    """The tiny CNN (with BatchNorm) with random parameters and running statistics."""
    torch.manual_seed(seed)
    model = tiny_image_classifier()
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.randn_like(tensor).abs() + 0.1)
            else:
                tensor.fill_(seed + 3)
    return model


def _all(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in [*model.named_parameters(), *model.named_buffers()]}


@pytest.mark.parametrize("smoothing", [0.0, 0.5, 0.99, 1.0])
@pytest.mark.parametrize("as_module", [True, False])
def test_compute_ema_is_composers_formula_on_parameters_and_buffers(smoothing: float, as_module: bool) -> None:
    model, ema_model = _model(0), _model(1)
    before, current = _all(ema_model), _all(model)
    target = ema_model if as_module else ema_weights(ema_model)
    compute_ema(model, target, smoothing=smoothing)
    after = _all(ema_model) if as_module else target
    assert set(after) == set(before) and any("running_var" in name for name in after)
    for name, old in before.items():
        if old.is_floating_point():  # Composer: ema_param * smoothing + (1. - smoothing) * model_param
            assert torch.equal(after[name], old * smoothing + (1.0 - smoothing) * current[name]), name
        else:  # num_batches_tracked: the model's counter
            assert torch.equal(after[name], current[name]), name
    if smoothing == 0.0:
        assert_same_tensors(after, current)
    if smoothing == 1.0:  # the average is kept (the counter is the model's)
        assert all(torch.equal(after[k], v) for k, v in before.items() if v.is_floating_point())


def test_k_updates_equal_the_closed_form() -> None:
    """W_k = s^k W_0 + (1 - s) * sum_i s^(k-i) W_i, in float64."""
    s, k = 0.9, 6
    ema = torch.nn.Linear(3, 2).double()
    start = copy.deepcopy(ema.state_dict())
    steps = [torch.nn.Linear(3, 2).double() for _ in range(k)]
    for model in steps:
        compute_ema(model, ema, s)
    for name, value in ema.state_dict().items():
        expected = s**k * start[name] + (1 - s) * sum(
            s ** (k - i) * m.state_dict()[name] for i, m in enumerate(steps, 1)
        )
        torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)


def test_chunked_updates_equal_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    model, ema_a, ema_b = _model(0), _model(1), _model(1)
    compute_ema(model, ema_a, 0.7)
    monkeypatch.setattr(ema_functional, "_CHUNK", 5)  # most tensors are larger: one per group
    compute_ema(model, ema_b, 0.7)
    assert_same_tensors(_all(ema_a), _all(ema_b))


def test_ema_weights_copies_trained_parameters_and_every_buffer() -> None:
    model = _model(0)
    model.module.head.weight.requires_grad_(False)  # frozen: never changes, never copied
    stored = ema_weights(model)
    assert "module.head.weight" not in stored and "module.head.bias" in stored
    assert {"module.features.1.running_mean", "module.features.1.num_batches_tracked"} <= set(stored)
    named = dict(model.named_parameters())
    assert stored["module.head.bias"].data_ptr() != named["module.head.bias"].data_ptr()


def test_swap_twice_restores_both_sides_and_keeps_the_parameter_objects() -> None:
    model, other = _model(0), _model(1)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    model.module(torch.rand(2, 3, 8, 8)).sum().backward()
    optimizer.step()
    training, stored = _all(model), ema_weights(other)
    averaged = {k: v.clone() for k, v in stored.items()}
    swap_weights(model, stored)
    assert_same_tensors(_all(model), averaged)
    assert_same_tensors(stored, training)
    swap_weights(model, stored)
    assert_same_tensors(_all(model), training)
    assert_same_tensors(stored, averaged)
    assert all(a is b for a, b in zip(model.parameters(), params)) and optimizer.param_groups[0]["params"] == params


@pytest.mark.parametrize(("half_life", "interval"), [(1, 1), (10, 1), (1000, 10), (4, 2)])
def test_smoothing_from_half_life_is_composers(half_life: int, interval: int) -> None:
    smoothing = smoothing_from_half_life(half_life, interval)
    assert smoothing == 2 ** (-(interval / half_life))
    assert math.isclose(smoothing, math.exp(-math.log(2) * interval / half_life), rel_tol=1e-12)
    assert math.isclose(smoothing ** (half_life / interval), 0.5, rel_tol=1e-12)  # the weight halves


@pytest.mark.parametrize("smoothing", [-0.1, 1.5, float("nan"), True, "0.9"])
def test_bad_smoothing_is_refused_naming_it(smoothing: object) -> None:
    with pytest.raises(ValueError, match="`smoothing`"):
        compute_ema(_model(0), _model(1), smoothing=smoothing)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`half_life`"):
        smoothing_from_half_life(0)
