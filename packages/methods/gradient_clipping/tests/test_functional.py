"""apply_gradient_clipping: AGC against its definition and Composer's formula, norm and value against torch."""

from __future__ import annotations

import pytest
import torch
from cadence_gradient_clipping import adaptive_clipping_coefficient, apply_gradient_clipping, unitwise_norm
from torch import nn


def _param(weights: torch.Tensor, grad: torch.Tensor) -> nn.Parameter:
    param = nn.Parameter(weights.clone())
    param.grad = grad.clone()
    return param


def _composer_coefficient(weights: torch.Tensor, grad: torch.Tensor, threshold: float) -> torch.Tensor:
    """Composer's _get_clipped_gradient_coeff (composer/algorithms/gradient_clipping), transcribed."""
    if weights.ndim <= 1:
        w_norm, g_norm = (torch.linalg.vector_norm(t, ord=2, dim=0) for t in (weights, grad))
    else:
        dims = tuple(range(1, weights.ndim))
        w_norm, g_norm = (torch.linalg.vector_norm(t, ord=2, dim=dims, keepdim=True) for t in (weights, grad))
    return w_norm.mul_(threshold).div_(g_norm).nan_to_num_(nan=1.0).clamp_(max=1.0)


def _agc_by_units(weights: torch.Tensor, grad: torch.Tensor, threshold: float, eps: float = 1e-3) -> torch.Tensor:
    """AGC unit by unit with Python loops (Brock et al., eq. 3): the definition the batched code must meet."""
    units_w = [weights] if weights.ndim <= 1 else list(weights)
    units_g = [grad] if grad.ndim <= 1 else list(grad)
    clipped = []
    for w, g in zip(units_w, units_g):
        limit = threshold * max(float(w.norm()), eps)
        clipped.append(g * (limit / float(g.norm())) if float(g.norm()) > limit else g)
    return clipped[0] if grad.ndim <= 1 else torch.stack(clipped)


def test_composer_hand_case() -> None:
    param = _param(torch.tensor([3.0, 4.0]), torch.tensor([7.0, 24.0]))  # ||w|| = 5, ||g|| = 25
    apply_gradient_clipping([param], "adaptive", 0.5)  # limit 2.5 -> factor 0.1
    torch.testing.assert_close(param.grad, torch.tensor([0.7, 2.4]))


def test_zero_weights_and_gradients_stay_zero() -> None:
    param = _param(torch.zeros(3, 4), torch.zeros(3, 4))
    apply_gradient_clipping([param], "adaptive", 0.01)
    assert torch.equal(param.grad, torch.zeros(3, 4))


@pytest.mark.parametrize("shape", [(5,), (6, 7), (4, 3, 5), (8, 3, 3, 3)], ids=["1d", "2d", "3d", "4d"])
def test_adaptive_clips_each_unit_as_its_definition_says(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(len(shape))
    weights = torch.randn(shape, generator=generator)
    # units with gradient/weight norm ratios from 0.02 to 0.8 around the threshold 0.3; one unit for a vector
    ratio = torch.linspace(0.02, 0.8, shape[0]).view(-1, *[1] * (len(shape) - 1)) if len(shape) > 1 else 2.0
    grad = torch.randn(shape, generator=generator) * ratio
    param = _param(weights, grad)
    apply_gradient_clipping(nn.ParameterList([param]), "adaptive", 0.3)
    expected = _agc_by_units(weights, grad, 0.3)
    torch.testing.assert_close(param.grad, expected, rtol=1e-6, atol=1e-7)
    kept = torch.isclose(expected, grad).reshape(shape[0], -1).all(-1) if len(shape) > 1 else torch.tensor([False])
    assert not bool(kept.all()) and (len(shape) == 1 or bool(kept.any())), "the case must clip some units only"
    assert unitwise_norm(weights).shape == (() if len(shape) == 1 else (shape[0], *[1] * (len(shape) - 1)))


@pytest.mark.parametrize("shape", [(5,), (6, 7), (4, 3, 5), (8, 3, 3, 3)], ids=["1d", "2d", "3d", "4d"])
def test_equals_composers_formula_bitwise_when_weights_are_not_tiny(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(7)
    weights, grad = torch.randn(shape, generator=generator), 5 * torch.randn(shape, generator=generator)
    assert bool((unitwise_norm(weights) >= 1e-3).all())
    ours = adaptive_clipping_coefficient(weights, grad, 0.1)
    assert torch.equal(ours, _composer_coefficient(weights, grad, 0.1))
    assert torch.equal(adaptive_clipping_coefficient(weights, grad, 0.1, eps=0.0), ours)


def test_a_zero_initialised_unit_still_learns_unlike_composer() -> None:
    weights = torch.stack([torch.zeros(4), torch.ones(4)])  # e.g. a zero-initialised row
    grad = torch.full((2, 4), 2.0)
    ours = adaptive_clipping_coefficient(weights, grad, 0.1)
    assert torch.allclose(ours.flatten(), torch.tensor([0.1 * 1e-3 / 4.0, 0.1 * 2.0 / 4.0]))
    composer = _composer_coefficient(weights, grad, 0.1)
    assert float(composer[0]) == 0.0  # Composer freezes that row for good
    assert torch.equal(adaptive_clipping_coefficient(weights, grad, 0.1, eps=0.0), composer)


def test_nan_gradients_pass_through_unscaled() -> None:
    param = _param(torch.ones(2, 3), torch.tensor([[float("nan"), 1.0, 1.0], [1.0, 1.0, 1.0]]))
    apply_gradient_clipping([param], "adaptive", 10.0)
    assert torch.isnan(param.grad[0, 0]) and torch.equal(param.grad[1], torch.ones(3))


def test_norm_clips_the_global_norm_as_torch_does() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    model(torch.randn(4, 6)).pow(2).sum().mul(50).backward()
    reference = [_param(p.detach(), p.grad) for p in model.parameters()]
    nn.utils.clip_grad_norm_(reference, max_norm=0.5)
    apply_gradient_clipping(model, "norm", 0.5)
    for ours, theirs in zip(model.parameters(), reference):
        assert torch.equal(ours.grad, theirs.grad)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert float(clipped) == pytest.approx(0.5, rel=1e-5)


def test_value_clamps_every_element() -> None:
    param = _param(torch.zeros(10), torch.linspace(-3, 3, 10))
    apply_gradient_clipping([param], "value", 1.5)
    assert torch.equal(param.grad, torch.linspace(-3, 3, 10).clamp(-1.5, 1.5))


def test_parameters_without_gradients_are_skipped() -> None:
    frozen, trained = nn.Parameter(torch.ones(3)), _param(torch.ones(3), torch.full((3,), 10.0))
    for kind in ("adaptive", "norm", "value"):
        apply_gradient_clipping(iter([frozen, trained]), kind, 1.0)  # a generator works like a list
        assert frozen.grad is None
    apply_gradient_clipping([frozen], "norm", 1.0)  # nothing to clip: no error


def test_unknown_type_is_refused_with_the_close_match() -> None:
    with pytest.raises(ValueError, match=r"`clipping_type`='nrom' must be one of .*did you mean 'norm'"):
        apply_gradient_clipping([], "nrom", 1.0)
    with pytest.raises(TypeError, match="`clipping_type`"):
        apply_gradient_clipping([], None, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [0, -1.0, float("inf"), float("nan"), True, "1.0", None])
def test_threshold_must_be_a_finite_positive_number(threshold: object) -> None:
    with pytest.raises(ValueError, match="`clipping_threshold`"):
        apply_gradient_clipping([], "norm", threshold)  # type: ignore[arg-type]
