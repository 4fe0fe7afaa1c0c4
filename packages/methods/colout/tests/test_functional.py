"""colout_batch: keeps int((1-p)·H) rows and int((1-p)·W) columns, in order, for every input form."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cadence_colout import ColOutTransform, colout_batch
from PIL import Image


def _coded(n: int, c: int, h: int, w: int) -> torch.Tensor:
    """Pixel value = 1000 * row + column, so the kept rows and columns can be read off the output."""
    code = (torch.arange(h)[:, None] * 1000 + torch.arange(w)[None, :]).float()
    return code.expand(n, c, h, w).clone()


def _lines(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept rows, kept columns) of each image of a coded output, shapes (N, H') and (N, W')."""
    return (out[:, 0, :, 0] // 1000).long(), (out[:, 0, 0, :] % 1000).long()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("h", "w"), [(32, 32), (17, 40), (9, 5)])
@pytest.mark.parametrize(("p_row", "p_col"), [(0.15, 0.15), (0.5, 0.0), (0.0, 0.9)])
def test_kept_counts_for_nchw_chw_and_pil(h: int, w: int, p_row: float, p_col: float) -> None:
    expected = (max(1, int((1 - p_row) * h)), max(1, int((1 - p_col) * w)))
    assert colout_batch(torch.rand(3, 2, h, w), p_row, p_col).shape == (3, 2, *expected)
    assert colout_batch(torch.rand(2, h, w), p_row, p_col).shape == (2, *expected)
    image = Image.fromarray((np.random.default_rng(0).random((h, w, 3)) * 255).astype(np.uint8))
    out = colout_batch(image, p_row, p_col)
    assert isinstance(out, Image.Image) and out.mode == "RGB" and out.size == expected[::-1]


def test_rows_and_columns_keep_their_order_and_values() -> None:
    out = colout_batch(_coded(4, 3, 20, 30), 0.3, 0.4, generator=_gen())
    rows, cols = _lines(out)
    assert rows.shape == (4, 14) and cols.shape == (4, 18)
    assert bool((rows.diff(dim=1) > 0).all()) and bool((cols.diff(dim=1) > 0).all())
    assert torch.equal(out, (rows[:, None, :, None] * 1000 + cols[:, None, None, :]).float().expand_as(out))


def test_batch_mode_shares_lines_and_sample_mode_draws_per_image() -> None:
    x = _coded(8, 2, 24, 24)
    rows, cols = _lines(colout_batch(x, batch=True, generator=_gen()))
    assert bool((rows == rows[0]).all()) and bool((cols == cols[0]).all())
    rows, cols = _lines(colout_batch(x, batch=False, generator=_gen()))
    assert rows.shape == (8, 20) and any(not torch.equal(rows[0], r) for r in rows[1:])
    assert any(not torch.equal(cols[0], c) for c in cols[1:])


@pytest.mark.parametrize("batch", [True, False])
def test_segmentation_target_loses_the_same_lines(batch: bool) -> None:
    x = _coded(4, 3, 16, 12)
    mask = x[:, 0].long()  # (N, H, W): the same code, as class indices
    new_x, new_mask = colout_batch((x, mask), 0.25, 0.25, batch=batch, generator=_gen())
    assert new_mask.shape == (4, 12, 9) and new_mask.dtype == torch.long
    assert torch.equal(new_mask, new_x[:, 0].long())


def test_label_targets_are_left_untouched() -> None:
    x, labels = torch.rand(4, 3, 8, 8), torch.arange(4)
    new_x, new_labels = colout_batch((x, labels))
    assert new_labels is labels and new_x.shape == (4, 3, 6, 6)
    dense = torch.rand(4, 8)  # (N, classes) with classes == W must not be mistaken for a mask
    assert colout_batch((x, dense))[1] is dense
    mask = torch.zeros(4, 8, 8)
    assert colout_batch((x, mask), resize_target=False)[1] is mask
    with pytest.raises(ValueError, match="`resize_target`=True"):
        colout_batch((x, labels), resize_target=True)


def test_pairs_keep_their_container_and_pil_pairs_work() -> None:
    x, mask = torch.rand(2, 3, 10, 10), torch.zeros(2, 10, 10)
    assert isinstance(colout_batch([x, mask]), list)
    image = Image.fromarray(np.zeros((10, 20, 3), dtype=np.uint8))
    label = Image.fromarray(np.zeros((10, 20), dtype=np.uint8))
    new_image, new_label = colout_batch((image, label))
    assert new_image.size == new_label.size == (17, 8) and new_label.mode == "L"


def test_reproducible_from_a_seed() -> None:
    x = torch.rand(4, 3, 16, 16)
    assert torch.equal(colout_batch(x, generator=_gen(3)), colout_batch(x, generator=_gen(3)))
    torch.manual_seed(0)
    a = colout_batch(x, batch=False)
    torch.manual_seed(0)
    assert torch.equal(a, colout_batch(x, batch=False))


def test_keeps_dtype_and_channels_last() -> None:
    x = (torch.rand(2, 3, 16, 16) * 255).to(torch.uint8).contiguous(memory_format=torch.channels_last)
    for batch in (True, False):
        out = colout_batch(x, batch=batch)
        assert out.dtype == torch.uint8 and out.is_contiguous(memory_format=torch.channels_last)


def test_zero_probabilities_keep_everything() -> None:
    x = torch.rand(2, 3, 7, 5)
    assert torch.equal(colout_batch(x, 0.0, 0.0), x)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p_row": 1.0}, "`p_row`"),
        ({"p_col": 1.5}, "`p_col`"),
        ({"p_row": -0.1}, "`p_row`"),
        ({"resize_target": "yes"}, "`resize_target`"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        colout_batch(torch.rand(1, 1, 4, 4), **kwargs)
    with pytest.raises(ValueError, match=match):
        ColOutTransform(**kwargs)


def test_bad_samples_raise() -> None:
    with pytest.raises(TypeError, match="PIL image"):
        colout_batch(np.zeros((3, 4, 4)))
    with pytest.raises(ValueError, match="pair"):
        colout_batch((torch.rand(3, 4, 4),) * 3)
    with pytest.raises(ValueError, match="shape"):
        colout_batch(torch.rand(4, 4))


def test_transform_on_pil_and_chw() -> None:
    transform = ColOutTransform(p_row=0.5, p_col=0.25)
    assert transform(torch.rand(3, 8, 8)).shape == (3, 4, 6)
    assert transform(Image.fromarray(np.zeros((8, 8), dtype=np.uint8))).size == (6, 4)
    assert repr(transform) == "ColOutTransform(p_row=0.5, p_col=0.25, resize_target='auto')"
