"""progressive_resizing_scale follows its schedule; resize_batch crops or interpolates to int(s·size)."""

from __future__ import annotations

import pytest
import torch
from cadence_progressive_resizing import progressive_resizing_scale, resize_batch


def _reference_scale(t: float, width: int, init: float, finetune: float, delay: float, increment: int) -> float:
    """composer_facts §1.3, written out independently."""
    frac = min(max((t - delay) / (1 - finetune - delay), 0.0), 1.0) if t >= delay else 0.0
    scale = init + (1 - init) * frac
    return round(width * scale / increment) * increment / width


@pytest.mark.parametrize("t", [0.0, 0.3, 0.5, 0.55, 0.6, 0.7, 0.79, 0.8, 0.9, 1.0])
@pytest.mark.parametrize(("width", "increment"), [(32, 4), (224, 32), (37, 1)])
def test_schedule_matches_the_formula_and_is_pinned(t: float, width: int, increment: int) -> None:
    scale = progressive_resizing_scale(t, width, 0.5, 0.2, 0.5, increment)
    assert scale == pytest.approx(_reference_scale(t, width, 0.5, 0.2, 0.5, increment))
    assert round(scale * width) % increment == 0


def test_schedule_phases() -> None:
    at = {t: progressive_resizing_scale(t, 32, 0.5, 0.2, 0.5, 4) for t in (0.0, 0.5, 0.6, 0.8, 0.95)}
    assert at[0.0] == at[0.5] == 0.5  # before and at the delay: the initial scale
    assert at[0.6] == 20 / 32  # a third of the ramp: 32 * (0.5 + 0.5 / 3) = 21.3 -> 20 (multiple of 4)
    assert at[0.8] == at[0.95] == 1.0  # the finetune phase: full size


def test_schedule_edge_cases() -> None:
    assert progressive_resizing_scale(0.5, 32, 0.5, 0.5, 0.5, 4) == 1.0  # no ramp: a step at the delay
    assert progressive_resizing_scale(0.49, 32, 0.5, 0.5, 0.5, 4) == 0.5
    assert progressive_resizing_scale(0.0, 3, 0.5, 0.2, 0.5, 4) == 1.0  # narrower than one increment
    assert progressive_resizing_scale(0.0, 32, 0.01, 0.2, 0.5, 4) == 4 / 32  # never below one increment


def test_scale_one_or_more_returns_the_same_objects() -> None:
    x, y = torch.rand(2, 3, 8, 8), torch.arange(2)
    for scale in (1, 1.0, 1.5):
        new_x, new_y = resize_batch(x, y, scale, resize_targets=False)
        assert new_x is x and new_y is y


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize(("h", "w", "scale"), [(32, 32, 0.5), (17, 23, 0.5), (15, 9, 0.75), (224, 224, 160 / 224)])
def test_output_size_is_int_scale_times_size(mode: str, h: int, w: int, scale: float) -> None:
    x, y = torch.rand(2, 3, h, w), torch.randint(0, 4, (2, h, w))
    new_x, new_y = resize_batch(x, y, scale, mode=mode, resize_targets=True)
    expected = (int(scale * h), int(scale * w)) if scale != 160 / 224 else (160, 160)
    assert new_x.shape == (2, 3, *expected) and new_y.shape == (2, *expected)
    assert new_y.dtype == torch.long


def test_crop_with_target_equal_to_input_gives_identical_crops() -> None:
    x = torch.rand(4, 3, 16, 16)
    new_x, new_y = resize_batch(x, x.clone(), 0.5, mode="crop", resize_targets=True)
    assert torch.equal(new_x, new_y)


def test_crop_is_one_window_shared_by_the_batch() -> None:
    code = (torch.arange(16)[:, None] * 100 + torch.arange(16)[None, :]).float().expand(3, 2, 16, 16)
    out, _ = resize_batch(code, None, 0.5, mode="crop", generator=torch.Generator().manual_seed(1))
    top, left = int(out[0, 0, 0, 0]) // 100, int(out[0, 0, 0, 0]) % 100
    assert torch.equal(out, code[..., top : top + 8, left : left + 8])


def test_crop_target_at_another_resolution_covers_the_same_region() -> None:
    code = (torch.arange(16)[:, None] * 100 + torch.arange(16)[None, :]).float().expand(1, 1, 16, 16)
    half = code[:, 0, ::2, ::2].clone()  # (N, 8, 8) target at half resolution
    out, target = resize_batch(code, half, 0.5, mode="crop", resize_targets=True)
    top, left = int(out[0, 0, 0, 0]) // 100, int(out[0, 0, 0, 0]) % 100
    assert target.shape == (1, 4, 4) and torch.equal(
        target, half[:, top // 2 : top // 2 + 4, left // 2 : left // 2 + 4]
    )


def _nearest_reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Composer's 'resize': nearest neighbour at `scale`, output pixel i reading source pixel floor(i / scale)."""
    rows = [int(i / scale) for i in range(int(x.shape[-2] * scale))]
    cols = [int(i / scale) for i in range(int(x.shape[-1] * scale))]
    return x[..., rows, :][..., cols]


@pytest.mark.parametrize(("size", "scale"), [(16, 0.5), (16, 0.75), (20, 0.6), (32, 0.25)])
def test_resize_defaults_to_composers_nearest_for_images_and_targets(size: int, scale: float) -> None:
    x = torch.rand(2, 3, size, size)
    labels = torch.randint(0, 5, (2, size, size))
    new_x, new_labels = resize_batch(x, labels, scale, resize_targets=True)
    assert torch.equal(new_x, _nearest_reference(x, scale))  # the very pixels, no blending
    assert torch.equal(new_labels, _nearest_reference(labels, scale))
    assert torch.equal(resize_batch(x, None, scale, interpolation="nearest")[0], new_x)


def test_nearest_keeps_the_pinned_size_where_floating_point_falls_short() -> None:
    # 44 * (30 / 44) is 29.999...: int() of it gives 29, the schedule asked for 30
    x = torch.rand(1, 3, 44, 44)
    assert resize_batch(x, None, 30 / 44)[0].shape[-2:] == (30, 30)


def test_bilinear_is_antialiased_like_pil_and_targets_stay_classes() -> None:
    image_module = pytest.importorskip("PIL.Image")
    pixels = torch.randint(0, 256, (1, 3, 24, 24), dtype=torch.uint8)
    labels = torch.randint(0, 5, (1, 24, 24))
    new_x, new_labels = resize_batch(pixels, labels, 0.5, resize_targets=True, interpolation="bilinear")
    pil = image_module.frombytes("RGB", (24, 24), pixels[0].permute(1, 2, 0).contiguous().numpy().tobytes())
    pil_small = pil.resize((12, 12), image_module.BILINEAR)  # PIL filters over every covered source pixel
    expected = torch.frombuffer(bytearray(pil_small.tobytes()), dtype=torch.uint8).view(12, 12, 3).permute(2, 0, 1)
    assert (new_x[0].int() - expected.int()).abs().max() <= 1
    assert not torch.equal(new_x, _nearest_reference(pixels, 0.5))
    assert set(new_labels.unique().tolist()) <= set(labels.unique().tolist())  # classes are never blended


def test_unknown_interpolation_is_refused() -> None:
    with pytest.raises(ValueError, match="`interpolation`"):
        resize_batch(torch.rand(1, 3, 8, 8), None, 0.5, interpolation="bicubic")


def test_keeps_dtype_device_and_channels_last() -> None:
    x = torch.rand(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    for mode in ("resize", "crop"):
        for dtype in (torch.float32, torch.float16, torch.uint8):
            out, _ = resize_batch(x.to(dtype), None, 0.5, mode=mode)
            assert out.dtype == dtype and out.is_contiguous(memory_format=torch.channels_last)


def test_crop_is_reproducible_from_a_seed() -> None:
    x = torch.rand(2, 3, 16, 16)
    a, _ = resize_batch(x, None, 0.5, mode="crop", generator=torch.Generator().manual_seed(4))
    b, _ = resize_batch(x, None, 0.5, mode="crop", generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((torch.rand(2, 3, 8, 8), None, 0.5), {"mode": "bicubic"}, "`mode`"),
        ((torch.rand(2, 3, 8, 8), None, 0.0), {}, "`scale_factor`"),
        ((torch.rand(3, 8, 8), None, 0.5), {}, "`input`"),
        ((torch.rand(2, 3, 8, 8), torch.arange(2), 0.5), {"resize_targets": True}, "`resize_targets`"),
    ],
)
def test_bad_arguments_raise(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        resize_batch(*args, **kwargs)
