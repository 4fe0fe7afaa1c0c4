"""cutout_batch: holes of the right size, clipped at the border, drawn per image, zero exactly there."""

from __future__ import annotations

import pytest
import torch
from cadence_cutout import cutout_batch
from cadence_cutout.functional import _draw_starts, _hole_mask


def _images(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) + 0.5  # no zeros before cutout


def _expected_boxes(n: int, h: int, w: int, side: int, holes: int, uniform: bool, seed: int) -> torch.Tensor:
    """The mask cutout_batch must produce: the same draws (top, then left) from an identically seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    top = _draw_starts((n, holes), h, side, uniform, generator, torch.device("cpu"))
    left = _draw_starts((n, holes), w, side, uniform, generator, torch.device("cpu"))
    return top, left


@pytest.mark.parametrize("shape", [(6, 3, 16, 16), (5, 2, 12, 20), (4, 1, 9, 7)])
@pytest.mark.parametrize("length", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("uniform", [False, True])
def test_zeroes_exactly_the_clipped_square(shape: tuple[int, ...], length: float, uniform: bool) -> None:
    n, c, h, w = shape
    side = int(min(h, w) * length)
    x = _images(shape)
    out = cutout_batch(
        x, num_holes=1, length=length, uniform_sampling=uniform, generator=torch.Generator().manual_seed(3)
    )
    top, left = _expected_boxes(n, h, w, side, 1, uniform, seed=3)
    for i in range(n):
        t, c0 = int(top[i, 0]), int(left[i, 0])
        rows = min(t + side, h) - max(t, 0)
        cols = min(c0 + side, w) - max(c0, 0)
        area = max(rows, 0) * max(cols, 0)
        assert int((out[i] == 0).sum()) == c * area  # the hole's area with clipping, in every channel
        box = torch.zeros(h, w, dtype=torch.bool)
        box[max(t, 0) : max(t + side, 0), max(c0, 0) : max(c0 + side, 0)] = True
        assert torch.equal(out[i][:, box], torch.zeros_like(out[i][:, box]))
        assert torch.equal(out[i][:, ~box], x[i][:, ~box])  # everything else unchanged


@pytest.mark.parametrize("uniform", [False, True])
def test_hole_is_one_rectangle_of_side_int_min_hw_length(uniform: bool) -> None:
    """Black-box: each image's zeros form one rectangle, side `int(min(H,W)*length)` unless clipped."""
    n, h, w, length = 64, 10, 14, 0.45
    side = int(min(h, w) * length)  # 4
    out = cutout_batch(
        _images((n, 2, h, w)), length=length, uniform_sampling=uniform, generator=torch.Generator().manual_seed(0)
    )
    interior = 0
    for image in out[:, 0]:
        zeros = image == 0
        if not zeros.any():
            continue
        rows = zeros.any(dim=1).nonzero().flatten()
        cols = zeros.any(dim=0).nonzero().flatten()
        r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
        assert int(zeros.sum()) == (r1 - r0) * (c1 - c0), "zeros are not one rectangle"
        assert r1 - r0 <= side and c1 - c0 <= side
        if r0 > 0 and r1 < h and c0 > 0 and c1 < w:
            interior += 1
            assert (r1 - r0, c1 - c0) == (side, side)
    assert interior > 0


def test_positions_are_drawn_per_image() -> None:
    out = cutout_batch(_images((16, 1, 16, 16)), generator=torch.Generator().manual_seed(0))
    masks = out[:, 0] == 0
    assert any(not torch.equal(masks[0], m) for m in masks[1:])


def test_several_holes_stay_inside_their_boxes() -> None:
    n, h, w, side, holes = 8, 16, 16, 4, 3
    out = cutout_batch(_images((n, 1, h, w)), num_holes=holes, length=0.25, generator=torch.Generator().manual_seed(5))
    top, left = _expected_boxes(n, h, w, side, holes, False, seed=5)
    assert torch.equal(out[:, 0] == 0, _hole_mask(top, left, side, h, w))
    assert bool(((out[:, 0] == 0).sum(dim=(1, 2)) <= holes * side * side).all())


@pytest.mark.parametrize("uniform", [False, True])
def test_uniform_sampling_covers_pixels_evenly(uniform: bool) -> None:
    """uniform_sampling=True masks every pixel equally often; the paper's sampling spares the corners."""
    n, size, side = 20000, 8, 4
    generator = torch.Generator().manual_seed(0)
    top = _draw_starts((n, 1), size, side, uniform, generator, torch.device("cpu"))
    left = _draw_starts((n, 1), size, side, uniform, generator, torch.device("cpu"))
    frequency = _hole_mask(top, left, side, size, size).float().mean(dim=0)
    corner, centre = float(frequency[0, 0]), float(frequency[size // 2, size // 2])
    if uniform:
        expected = (side / (size + side - 1)) ** 2
        assert abs(corner - expected) < 0.02 and abs(centre - expected) < 0.02
    else:  # centre uniform in [0, 8), hole rows [c - 2, c + 2): pixel 0 is hit by 3 of 8 centres, pixel 4 by 4
        assert abs(corner - (3 / 8) ** 2) < 0.02 and abs(centre - (4 / 8) ** 2) < 0.02


def test_single_image_dtype_memory_format_and_no_in_place_change() -> None:
    chw = _images((3, 12, 12))
    assert cutout_batch(chw, generator=torch.Generator().manual_seed(0)).shape == (3, 12, 12)
    x = _images((2, 3, 12, 12)).contiguous(memory_format=torch.channels_last)
    before = x.clone()
    out = cutout_batch(x, generator=torch.Generator().manual_seed(0))
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x, before)
    for dtype in (torch.uint8, torch.float16, torch.bfloat16):
        assert cutout_batch(x.to(dtype)).dtype == dtype


def test_same_seed_same_holes() -> None:
    x = _images((4, 3, 16, 16))
    a = cutout_batch(x, generator=torch.Generator().manual_seed(7))
    b = cutout_batch(x, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_tiny_length_is_a_no_op() -> None:
    x = _images((2, 1, 3, 3))
    assert torch.equal(cutout_batch(x, length=0.2), x)  # int(3 * 0.2) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"length": -0.1}, "`length`"),
        ({"length": 1.5}, "`length`"),
        ({"num_holes": 0}, "`num_holes`"),
        ({"num_holes": 1.0}, "`num_holes`"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cutout_batch(torch.rand(1, 1, 4, 4), **kwargs)


def test_bad_inputs_raise() -> None:
    with pytest.raises(TypeError, match="`input`"):
        cutout_batch(torch.rand(4, 4))
    with pytest.raises(TypeError, match="`uniform_sampling`"):
        cutout_batch(torch.rand(1, 1, 4, 4), uniform_sampling="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_pil_image_in_pil_image_out(mode: str) -> None:
    """Composer's cutout_batch keeps the type: a PIL image gets a square hole (side int(min(H, W) * length))."""
    image_module = pytest.importorskip("PIL.Image")
    image = image_module.new(mode, (20, 12), 200 if mode == "L" else (200, 150, 100))  # W 20, H 12
    out = cutout_batch(image, length=0.5, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, image_module.Image) and out.mode == mode and out.size == image.size
    pixels = torch.frombuffer(bytearray(out.tobytes()), dtype=torch.uint8).view(12, 20, len(out.getbands()))
    zero = (pixels == 0).all(dim=-1)
    rows, cols = zero.any(dim=1).nonzero().flatten(), zero.any(dim=0).nonzero().flatten()
    assert 0 < len(rows) <= 6 and 0 < len(cols) <= 6  # side int(12 * 0.5) = 6, clipped at the border
    assert zero.sum() == len(rows) * len(cols)  # one contiguous rectangle
    assert torch.equal(rows, torch.arange(rows[0], rows[-1] + 1)) and torch.equal(
        cols, torch.arange(cols[0], cols[-1] + 1)
    )
    untouched = pixels[~zero]
    assert torch.equal(
        untouched,
        torch.tensor(image.getpixel((0, 0)) if mode == "RGB" else (200,)).expand_as(untouched).to(torch.uint8),
    )
    assert image.getpixel((0, 0)) == (200 if mode == "L" else (200, 150, 100))  # the input is not changed
