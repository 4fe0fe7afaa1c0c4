"""`smooth_labels`: the math, checked against its definition."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cadence_label_smoothing import smooth_labels


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_index_and_one_hot_targets_agree_with_the_definition(smoothing: float) -> None:
    logits = torch.randn(6, 5)
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    one_hot = F.one_hot(target, 5).float()
    expected = one_hot * (1 - smoothing) + smoothing / 5
    from_index = smooth_labels(logits, target, smoothing)
    from_one_hot = smooth_labels(logits, one_hot, smoothing)
    torch.testing.assert_close(from_index, expected)
    assert torch.equal(from_index, from_one_hot)
    torch.testing.assert_close(from_index.sum(dim=1), torch.ones(6))


def test_smoothing_zero_is_the_identity() -> None:
    dense = torch.softmax(torch.randn(4, 3), dim=1)
    assert torch.equal(smooth_labels(torch.zeros(4, 3), dense, 0.0), dense)
    target = torch.tensor([2, 0, 1, 1])
    assert torch.equal(smooth_labels(torch.zeros(4, 3), target, 0.0), F.one_hot(target, 3).float())


def test_smoothing_one_is_uniform() -> None:
    out = smooth_labels(torch.zeros(3, 4), torch.tensor([0, 1, 3]), 1.0)
    assert torch.equal(out, torch.full((3, 4), 0.25))


def test_already_dense_targets_keep_summing_to_one() -> None:
    mixed = 0.7 * F.one_hot(torch.tensor([0, 1, 2]), 3).float() + 0.3 * F.one_hot(torch.tensor([2, 2, 0]), 3).float()
    torch.testing.assert_close(smooth_labels(torch.zeros(3, 3), mixed, 0.2).sum(dim=1), torch.ones(3))


def test_segmentation_targets_nchw() -> None:
    logits = torch.randn(2, 4, 3, 5)
    target = torch.randint(0, 4, (2, 3, 5))
    out = smooth_labels(logits, target, 0.2)
    assert out.shape == logits.shape
    torch.testing.assert_close(out.sum(dim=1), torch.ones(2, 3, 5))
    torch.testing.assert_close(out, F.one_hot(target, 4).permute(0, 3, 1, 2).float() * 0.8 + 0.05)
    assert torch.equal(smooth_labels(logits, F.one_hot(target, 4).permute(0, 3, 1, 2).float(), 0.2), out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtypes(dtype: torch.dtype) -> None:
    logits = torch.zeros(2, 3, dtype=dtype)
    out = smooth_labels(logits, torch.tensor([0, 2]))
    assert out.dtype == torch.promote_types(dtype, torch.float32)
    dense = torch.eye(3, dtype=dtype)[:2]
    assert smooth_labels(logits, dense).dtype == dtype


def test_the_input_target_is_not_modified() -> None:
    dense = torch.eye(3)
    before = dense.clone()
    smooth_labels(torch.zeros(3, 3), dense, 0.3)
    assert torch.equal(dense, before)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((torch.zeros(2, 3), torch.tensor([0, 1]), -0.1), ValueError, "`smoothing`"),
        ((torch.zeros(2, 3), torch.tensor([0, 1]), 1.5), ValueError, "`smoothing`"),
        ((torch.zeros(2, 3), torch.tensor([0, 1]), "0.1"), TypeError, "`smoothing`"),
        ((torch.zeros(2, 3), torch.tensor([0, 1]), True), TypeError, "`smoothing`"),
        ((torch.zeros(3), torch.tensor([0, 1]), 0.1), TypeError, "`logits`"),
        ((torch.zeros(2, 3), [0, 1], 0.1), TypeError, "`target`"),
        ((torch.zeros(2, 3), torch.tensor([0, 1, 2]), 0.1), ValueError, "`targets?`"),
        ((torch.zeros(2, 3), torch.tensor([0.0, 1.0]), 0.1), ValueError, "`targets?`"),
    ],
)
def test_bad_arguments_are_rejected(args: tuple, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        smooth_labels(*args)
