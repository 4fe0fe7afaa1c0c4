"""`cutmix_batch`: the math, checked against its definition."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from cadence_cutmix import cutmix_batch
from cadence_cutmix.functional import _draw_lambda, _interpolate_loss, _mix
from cadence_cutmix.functional import sample_bbox as _random_bbox

from cadence.ops import ensure_targets_one_hot


def _constant_images(n: int, height: int = 8, width: int = 8) -> torch.Tensor:
    """Image i is filled with the value i + 1, so every pixel tells which image it came from."""
    return (torch.arange(n, dtype=torch.float32) + 1).view(n, 1, 1, 1).expand(n, 3, height, width).clone()


def _box_mask(bbox: tuple[int, int, int, int], height: int, width: int) -> torch.Tensor:
    x1, y1, x2, y2 = bbox
    mask = torch.zeros(height, width, dtype=torch.bool)
    mask[x1:x2, y1:y2] = True
    return mask


@pytest.mark.parametrize("uniform_sampling", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_pixels_inside_the_box_come_from_the_permuted_batch_and_the_others_are_unchanged(
    uniform_sampling: bool, seed: int
) -> None:
    x = torch.randn(6, 3, 10, 12, generator=torch.Generator().manual_seed(seed))
    labels = torch.arange(6)  # distinct labels reveal the permutation
    generator = torch.Generator().manual_seed(seed)
    mixed, y_perm, area, bbox = cutmix_batch(x, labels, uniform_sampling=uniform_sampling, generator=generator)
    perm = y_perm
    assert sorted(perm.tolist()) == list(range(6))
    inside = _box_mask(bbox, 10, 12)
    for i in range(6):
        assert torch.equal(mixed[i][:, inside], x[perm[i]][:, inside])
        assert torch.equal(mixed[i][:, ~inside], x[i][:, ~inside])
    assert area == 1 - inside.sum().item() / (10 * 12)


@pytest.mark.parametrize("seed", range(8))
def test_area_is_exactly_the_fraction_of_pixels_not_pasted_over(seed: int) -> None:
    x = _constant_images(4, 9, 7)
    indices = torch.tensor([1, 2, 3, 0])  # no example keeps itself, so every pasted pixel changes
    mixed, _, area, _ = cutmix_batch(x, torch.arange(4), indices=indices, generator=torch.Generator().manual_seed(seed))
    pasted = (mixed[0, 0] != x[0, 0]).sum().item()
    assert area == 1 - pasted / (9 * 7)
    assert 0.0 <= area <= 1.0


def test_a_given_box_indexes_rows_then_columns_like_composer() -> None:
    x = _constant_images(2, 4, 6)
    mixed, _, area, bbox = cutmix_batch(x, torch.arange(2), bbox=(1, 2, 3, 5), indices=torch.tensor([1, 0]))
    assert bbox == (1, 2, 3, 5)
    assert torch.equal(mixed[0, 0] == 2, _box_mask((1, 2, 3, 5), 4, 6))
    assert area == 1 - (2 * 3) / (4 * 6)


def test_mixed_targets_weight_the_original_label_by_area() -> None:
    y = torch.tensor([0, 1, 2, 3, 0])
    indices = torch.tensor([4, 2, 3, 0, 1])
    _, y_perm, area, _ = cutmix_batch(
        _constant_images(5), y, indices=indices, generator=torch.Generator().manual_seed(1)
    )
    mixed = _mix(ensure_targets_one_hot(torch.zeros(5, 4), y), indices, area)
    torch.testing.assert_close(mixed, area * F.one_hot(y, 4).float() + (1 - area) * F.one_hot(y_perm, 4).float())
    torch.testing.assert_close(mixed.sum(dim=1), torch.ones(5))


def test_target_interpolation_equals_loss_interpolation_for_cross_entropy() -> None:
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(1))
    logits = torch.randn(16, 5, generator=torch.Generator().manual_seed(2))
    indices = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    _, y_perm, area, _ = cutmix_batch(x, y, indices=indices, generator=torch.Generator().manual_seed(4))
    by_targets = F.cross_entropy(logits, _mix(ensure_targets_one_hot(logits, y), indices, area))
    by_loss = _interpolate_loss(F.cross_entropy(logits, y), F.cross_entropy(logits, y_perm), area)
    assert abs(by_targets.item() - by_loss.item()) <= 1e-6


def test_the_box_side_follows_sqrt_one_minus_lambda() -> None:
    for seed in range(20):
        lam = _draw_lambda(1.0, torch.Generator().manual_seed(seed))  # the first draw of the same generator
        x1, y1, x2, y2 = _random_bbox(64, 48, None, 1.0, True, torch.Generator().manual_seed(seed))
        cut_h, cut_w = int(64 * math.sqrt(1 - lam)), int(48 * math.sqrt(1 - lam))
        assert x2 - x1 <= cut_h and y2 - y1 <= cut_w
        if x1 > 0 and x2 < 64:
            assert x2 - x1 == cut_h
        if y1 > 0 and y2 < 48:
            assert y2 - y1 == cut_w


def test_length_fixes_the_box_side() -> None:
    sides = set()
    for seed in range(50):
        x1, y1, x2, y2 = _random_bbox(10, 20, 0.5, 1.0, False, torch.Generator().manual_seed(seed))
        assert x2 - x1 <= 5 and y2 - y1 <= 10
        sides.add((x2 - x1, y2 - y1))
    assert (5, 10) in sides


def _coverage(uniform_sampling: bool, draws: int = 3000) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(11, 11)
    for _ in range(draws):
        counts += _box_mask(_random_bbox(11, 11, 4 / 11, 1.0, uniform_sampling, generator), 11, 11)
    return counts / draws


def test_uniform_sampling_pastes_every_pixel_equally_often() -> None:
    coverage = _coverage(uniform_sampling=True)
    expected = 4 / (11 + 4 - 1)  # a side-4 box: 4 of the 14 possible centres cover each row (and column)
    assert (coverage - expected**2).abs().max() < 0.04


def test_default_sampling_pastes_the_centre_more_often_than_the_corners() -> None:
    coverage = _coverage(uniform_sampling=False)
    # a side-4 box [c - 2, c + 2) around a centre c uniform in 0..10 covers a row with probability
    # 4/11 in the middle, 3/11 on the first row and 2/11 on the last one (clipping)
    for pixel, rows in ((5, 4), (0, 3), (10, 2)):
        assert abs(coverage[pixel, pixel].item() - (rows / 11) ** 2) < 0.02


def test_segmentation_targets_take_the_box_with_the_documented_one_liner() -> None:
    x = _constant_images(3, 6, 6)
    y = torch.arange(3).view(3, 1, 1).expand(3, 6, 6).clone()
    mixed, y_perm, _, (x1, y1, x2, y2) = cutmix_batch(x, y, generator=torch.Generator().manual_seed(2))
    y = y.clone()
    y[..., x1:x2, y1:y2] = y_perm[..., x1:x2, y1:y2]
    assert torch.equal(y + 1, mixed[:, 0].long())  # the label map follows the pixels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.uint8])
def test_dtype_and_memory_format_are_kept(dtype: torch.dtype) -> None:
    x = (_constant_images(4) * 10).to(dtype).contiguous(memory_format=torch.channels_last)
    mixed, _, _, _ = cutmix_batch(x, torch.arange(4), generator=torch.Generator().manual_seed(0))
    assert mixed.dtype == dtype and mixed.device == x.device
    assert mixed.is_contiguous(memory_format=torch.channels_last)


def test_input_is_not_modified_in_place() -> None:
    x = _constant_images(4)
    before = x.clone()
    cutmix_batch(x, torch.arange(4), bbox=(0, 0, 8, 8), indices=torch.tensor([1, 2, 3, 0]))
    assert torch.equal(x, before)


def test_a_single_example_is_pasted_into_itself() -> None:
    x = torch.randn(1, 3, 8, 8)
    mixed, _, _, _ = cutmix_batch(x, torch.zeros(1, dtype=torch.long), generator=torch.Generator().manual_seed(0))
    assert torch.equal(mixed, x)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"length": 0.5, "bbox": (0, 0, 2, 2)}, ValueError, "`length` or `bbox`"),
        ({"alpha": 0.0}, ValueError, "`alpha`"),
        ({"alpha": -2}, ValueError, "`alpha`"),
        ({"length": 1.5}, ValueError, "`length`"),
        ({"length": "half"}, ValueError, "`length`"),
        ({"bbox": (0, 0, 9, 2)}, ValueError, "`bbox`"),
        ({"bbox": (3, 0, 2, 2)}, ValueError, "`bbox`"),
        ({"bbox": (0, 0, 2)}, ValueError, "`bbox`"),
        ({"indices": torch.arange(3)}, ValueError, "`indices`"),
        ({"uniform_sampling": "yes"}, TypeError, "`uniform_sampling`"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        cutmix_batch(_constant_images(4), torch.arange(4), **kwargs)


def test_inputs_without_spatial_dimensions_are_rejected() -> None:
    with pytest.raises(TypeError, match="at least 3 dimensions"):
        cutmix_batch(torch.zeros(4, 10), torch.arange(4))
