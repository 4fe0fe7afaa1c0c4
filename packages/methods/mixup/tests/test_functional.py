"""`mixup_batch`: the math, checked against its definition."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cadence_mixup import mixup_batch

from cadence.ops import ensure_targets_one_hot
from cadence.ops import interpolate_loss as _interpolate_loss
from cadence.ops import mix_with_permutation as _mix


def _batch(n: int = 8, num_classes: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 6, 6, generator=generator), torch.randint(0, num_classes, (n,), generator=generator)


def test_mixing_zero_returns_the_input() -> None:
    x, y = _batch()
    mixed, y_perm, mixing = mixup_batch(x, y, mixing=0.0, generator=torch.Generator().manual_seed(3))
    assert mixing == 0.0
    assert torch.equal(mixed, x)
    assert y_perm.shape == y.shape


@pytest.mark.parametrize("alpha", [0.2, 1.0, 4.0])
def test_inputs_and_targets_share_one_permutation(alpha: float) -> None:
    x, _ = _batch(n=10)
    labels = torch.arange(10)  # distinct labels reveal the permutation
    mixed, y_perm, m = mixup_batch(x, labels, alpha=alpha, generator=torch.Generator().manual_seed(1))
    perm = y_perm
    assert sorted(perm.tolist()) == list(range(10))
    for i in range(10):
        torch.testing.assert_close(mixed[i], (1 - m) * x[i] + m * x[perm[i]], rtol=0, atol=1e-6)


def test_given_indices_are_used() -> None:
    x, y = _batch(n=4)
    indices = torch.tensor([2, 3, 0, 1])
    mixed, y_perm, m = mixup_batch(x, y, mixing=0.25, indices=indices)
    assert m == 0.25
    assert torch.equal(y_perm, y[indices])
    torch.testing.assert_close(mixed, 0.75 * x + 0.25 * x[indices])


def test_drawn_mixing_is_at_most_one_half_and_follows_the_beta_law() -> None:
    x, y = _batch(n=2)
    generator = torch.Generator().manual_seed(0)
    draws = torch.tensor([mixup_batch(x, y, alpha=1.0, generator=generator)[2] for _ in range(1000)])
    assert (draws >= 0).all() and (draws <= 0.5).all()
    # λ ~ Beta(1, 1) is uniform, so min(λ, 1 - λ) is uniform on [0, 1/2]: mean 1/4 (standard error 0.005)
    assert abs(draws.mean().item() - 0.25) < 0.015
    # small alpha mixes little: Beta(0.2, 0.2) puts most of its mass near 0 and 1
    small = torch.tensor([mixup_batch(x, y, alpha=0.2, generator=generator)[2] for _ in range(1000)])
    assert small.median() < draws.median()


def test_mixed_one_hot_targets_sum_to_one() -> None:
    x, y = _batch(n=16, num_classes=7)
    _, y_perm, m = mixup_batch(x, y, generator=torch.Generator().manual_seed(2))
    mixed = (1 - m) * F.one_hot(y, 7).float() + m * F.one_hot(y_perm, 7).float()
    torch.testing.assert_close(mixed.sum(dim=1), torch.ones(16))
    assert (mixed.max(dim=1).values >= 0.5).all()  # the original label stays dominant


def test_target_interpolation_equals_loss_interpolation_for_cross_entropy() -> None:
    x, y = _batch(n=16, num_classes=5)
    logits = torch.randn(16, 5, generator=torch.Generator().manual_seed(4))
    indices = torch.randperm(16, generator=torch.Generator().manual_seed(5))
    _, y_perm, m = mixup_batch(x, y, alpha=1.0, indices=indices, generator=torch.Generator().manual_seed(6))
    dense = _mix(ensure_targets_one_hot(logits, y), indices, m)
    by_targets = F.cross_entropy(logits, dense)
    by_loss = _interpolate_loss(F.cross_entropy(logits, y), F.cross_entropy(logits, y_perm), m)
    assert abs(by_targets.item() - by_loss.item()) <= 1e-6


def test_dense_targets_are_permuted_like_index_targets() -> None:
    x, y = _batch(n=6, num_classes=4)
    one_hot = F.one_hot(y, 4).float()
    _, perm_index, _ = mixup_batch(x, y, generator=torch.Generator().manual_seed(9))
    _, perm_dense, _ = mixup_batch(x, one_hot, generator=torch.Generator().manual_seed(9))
    assert torch.equal(F.one_hot(perm_index, 4).float(), perm_dense)


def test_segmentation_index_targets_become_one_hot_along_dim_1() -> None:
    logits = torch.zeros(2, 3, 4, 4)
    target = torch.randint(0, 3, (2, 4, 4))
    dense = ensure_targets_one_hot(logits, target)
    assert dense.shape == logits.shape
    assert torch.equal(dense.argmax(dim=1), target)


def test_the_generator_makes_draws_reproducible_and_the_global_rng_is_used_without_one() -> None:
    x, y = _batch()
    first = mixup_batch(x, y, generator=torch.Generator().manual_seed(11))
    again = mixup_batch(x, y, generator=torch.Generator().manual_seed(11))
    assert torch.equal(first[0], again[0]) and first[2] == again[2]
    torch.manual_seed(5)
    a = mixup_batch(x, y)
    torch.manual_seed(5)
    b = mixup_batch(x, y)
    assert torch.equal(a[0], b[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_dtype_and_memory_format_are_kept(dtype: torch.dtype) -> None:
    x, y = _batch()
    x = x.to(dtype).contiguous(memory_format=torch.channels_last)
    mixed, _, _ = mixup_batch(x, y, generator=torch.Generator().manual_seed(0))
    assert mixed.dtype == dtype and mixed.device == x.device
    assert mixed.is_contiguous(memory_format=torch.channels_last)


def test_a_single_example_is_mixed_with_itself() -> None:
    x, y = _batch(n=1)
    mixed, y_perm, _ = mixup_batch(x, y, alpha=1.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mixed, x)
    assert torch.equal(y_perm, y)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"alpha": 0.0}, ValueError, "`alpha`"),
        ({"alpha": -1.0}, ValueError, "`alpha`"),
        ({"alpha": "0.2"}, ValueError, "`alpha`"),
        ({"mixing": 1.5}, ValueError, "`mixing`"),
        ({"mixing": -0.1}, ValueError, "`mixing`"),
        ({"mixing": "half"}, TypeError, "`mixing`"),
        ({"indices": torch.arange(3)}, ValueError, "`indices`"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, error: type, words: str) -> None:
    x, y = _batch(n=4)
    with pytest.raises(error, match=words):
        mixup_batch(x, y, **kwargs)


def test_integer_inputs_are_rejected() -> None:
    with pytest.raises(TypeError, match="floating-point"):
        mixup_batch(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.long))
