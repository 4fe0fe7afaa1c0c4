"""Augmentation primitives: per-sample batching, identities, PIL parity, random draws, formats."""

from __future__ import annotations

import pytest
import torch

from cadence.ops import augment, dataset_transforms, image_ops, pil, pixels
from cadence.testing import HOST_SYNC_OPS, recording_ops

PRIMITIVES = ["color", "contrast", "brightness", "sharpness", "autocontrast", "equalize", "posterize", "solarize"]


def _smooth_images(n: int, height: int = 20, width: int = 24, seed: int = 0) -> torch.Tensor:
    """uint8-valued float pixels (N, 3, H, W) with structure (upsampled noise), as natural images have."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 5, 6, generator=generator) * 255
    return torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear").round()


def _params(key: str, n: int, seed: int = 0) -> torch.Tensor:
    """Random non-identity parameters of a primitive, one per sample."""
    generator = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=generator)
    if key in ("autocontrast", "equalize"):
        return torch.ones(n)
    if key == "posterize":
        return torch.randint(1, 5, (n,), generator=generator).float()
    if key == "solarize":
        return (u * 256).floor()
    return u * 3  # enhancement factors in [0, 3)


def _matrices(n: int, height: int, width: int) -> torch.Tensor:
    ops = torch.tensor(
        [image_ops.OPS.index(op) for op in ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")]
    )
    op_ids = ops[torch.arange(n) % len(ops)]
    values = torch.tensor([13.0, 0.2, -0.25, 5.0, -4.0, -29.0, -0.1, 0.3, -7.0, 3.0])[:n]
    return image_ops.affine_matrix(op_ids, values, height, width)


@pytest.mark.parametrize("key", PRIMITIVES)
def test_batched_primitive_equals_each_image_alone(key: str) -> None:
    images, params = _smooth_images(6), _params(key, 6)
    batched = image_ops.PRIMITIVES[key](images, params)
    alone = torch.cat([image_ops.PRIMITIVES[key](images[i : i + 1], params[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-4)
    assert not torch.equal(batched, images)


def test_batched_warp_equals_each_image_alone() -> None:
    images = _smooth_images(10)
    matrices = _matrices(10, 20, 24)
    batched = pixels.warp_affine(images, matrices)
    alone = torch.cat([pixels.warp_affine(images[i : i + 1], matrices[i : i + 1]) for i in range(10)])
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-3)


@pytest.mark.parametrize("key", [*PRIMITIVES, "affine"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identity_parameters_return_the_input_exactly(key: str, dtype: torch.dtype) -> None:
    # continuous values (not only 8-bit levels): the identity must not even round
    images = (torch.rand(3, 3, 9, 11, generator=torch.Generator().manual_seed(1)) * 255).to(dtype)
    identity = torch.eye(2, 3).expand(3, 2, 3) if key == "affine" else torch.full((3,), image_ops._IDENTITY[key])
    assert torch.equal(image_ops.PRIMITIVES[key](images, identity), images)


def test_mixed_identity_and_changed_samples() -> None:
    images = _smooth_images(4)
    factors = torch.tensor([1.0, 0.3, 1.0, 2.0])
    out = pixels.color(images, factors)
    assert torch.equal(out[0], images[0]) and torch.equal(out[2], images[2])
    assert not torch.equal(out[1], images[1]) and not torch.equal(out[3], images[3])


# Parity with PIL, the reference implementation (8-bit images) ------------------------------------


def _pil_reference():
    image_module = pytest.importorskip("PIL.Image")
    from PIL import ImageEnhance, ImageOps

    return image_module, ImageEnhance, ImageOps


def _to_pil(image: torch.Tensor):
    from PIL import Image

    return Image.fromarray(image.to(torch.uint8).permute(1, 2, 0).contiguous().numpy())


def _from_pil(image) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float()


def _assert_near_pil(ours: torch.Tensor, reference: torch.Tensor, max_level: float = 1) -> None:
    """PIL truncates where cadence rounds: one 8-bit level apart at most (more with strong extrapolation)."""
    difference = (ours.round() - reference).abs()
    assert difference.max() <= max_level, f"max difference {difference.max()} levels"


def test_point_and_enhance_ops_match_pil() -> None:
    _, enhance, ops = _pil_reference()
    image = _smooth_images(1)
    pil, one = _to_pil(image[0]), lambda v: torch.tensor([float(v)])
    assert torch.equal(pixels.equalize(image, one(1))[0], _from_pil(ops.equalize(pil)))
    _assert_near_pil(pixels.autocontrast(image, one(1))[0], _from_pil(ops.autocontrast(pil)))
    for bits in (1, 2, 3, 4):
        assert torch.equal(pixels.posterize(image, one(bits))[0], _from_pil(ops.posterize(pil, bits)))
    for threshold in (0, 77, 200, 256):
        assert torch.equal(pixels.solarize(image, one(threshold))[0], _from_pil(ops.solarize(pil, threshold)))
    for factor in (0.1, 0.8, 1.6, 4.0):
        slack = 1 if factor < 2 else 2  # PIL rounds the degenerate image, then extrapolates its error
        _assert_near_pil(pixels.color(image, one(factor))[0], _from_pil(enhance.Color(pil).enhance(factor)), slack)
        _assert_near_pil(
            pixels.contrast(image, one(factor))[0], _from_pil(enhance.Contrast(pil).enhance(factor)), slack
        )
        _assert_near_pil(pixels.brightness(image, one(factor))[0], _from_pil(enhance.Brightness(pil).enhance(factor)))
        _assert_near_pil(
            pixels.sharpness(image, one(factor))[0], _from_pil(enhance.Sharpness(pil).enhance(factor)), slack
        )


@pytest.mark.parametrize(
    ("op", "value", "pil_args"),
    [
        ("rotate", 23.0, None),
        ("rotate", -9.0, None),
        ("shear_x", 0.27, (1, 0.27, 0, 0, 1, 0)),
        ("shear_y", -0.18, (1, 0, 0, -0.18, 1, 0)),
        ("translate_x", 7.0, (1, 0, 7, 0, 1, 0)),
        ("translate_y", -5.0, (1, 0, 0, 0, 1, -5)),
    ],
)
def test_geometric_ops_match_pil(op: str, value: float, pil_args: tuple | None) -> None:
    image_module, _, _ = _pil_reference()
    image = _smooth_images(1)
    pil = _to_pil(image[0])
    bilinear = image_module.Resampling.BILINEAR
    if pil_args is None:
        reference = pil.rotate(value, resample=bilinear)
    else:
        reference = pil.transform(pil.size, image_module.Transform.AFFINE, pil_args, resample=bilinear)
    ours = pixels.warp_affine(image, image_ops.affine_matrix(op, torch.tensor([value]), 20, 24))[0]
    _assert_near_pil(ours, _from_pil(reference))


# Random parameters ---------------------------------------------------------------------------------


def _magnitudes(op: str, severity: float, n: int = 4000, height: int = 30, width: int = 60) -> torch.Tensor:
    uniforms = torch.rand(n, 4, generator=torch.Generator().manual_seed(0))
    return image_ops.op_magnitudes(torch.full((n,), image_ops.OPS.index(op)), uniforms, severity, height, width)


def test_magnitudes_follow_composer_ranges() -> None:
    rotate = _magnitudes("rotate", 9)
    assert torch.equal(rotate, rotate.round()) and rotate.abs().max() <= 27 and (rotate < 0).any()
    assert set(_magnitudes("posterize", 9).unique().tolist()) == {1.0, 2.0, 3.0, 4.0}
    solarize = _magnitudes("solarize", 10)
    assert solarize.min() >= 0 and solarize.max() <= 256 and torch.equal(solarize, solarize.round())
    assert _magnitudes("shear_x", 10).abs().max() <= 0.3
    assert _magnitudes("translate_x", 10).abs().max() <= 20 and _magnitudes("translate_y", 10).abs().max() <= 10
    contrast = _magnitudes("contrast", 3)
    assert contrast.min() >= 1 - 0.27 and contrast.max() <= 3 and ((contrast < 1).float().mean() - 0.5).abs() < 0.05
    assert _magnitudes("brightness", 3).max() <= 2.25  # brightening factors scaled by 0.75
    original = _magnitudes("color_original", 10)
    assert original.min() >= 0.118 - 1e-6 and original.max() <= 1.9
    assert torch.equal(_magnitudes("equalize", 5), torch.ones(4000))


def test_primitive_parameters_are_identity_for_other_samples() -> None:
    op_ids = torch.tensor([image_ops.OPS.index("solarize"), image_ops.OPS.index("rotate"), -1])
    values = torch.tensor([100.0, 12.0, 0.0])
    params = image_ops.primitive_parameters(op_ids, values, 8, 8, ("solarize", "rotate"))
    assert params["solarize"].tolist() == [100.0, 256.0, 256.0]
    assert torch.equal(params["affine"][0], torch.eye(2, 3)) and torch.equal(params["affine"][2], torch.eye(2, 3))
    assert not torch.equal(params["affine"][1], torch.eye(2, 3))


def test_augmentation_sets_are_composers() -> None:
    colour = {"color", "contrast", "brightness", "sharpness"}
    assert len(image_ops.augmentation_sets["all"]) == 13 and colour <= set(image_ops.augmentation_sets["all"])
    assert not colour & set(image_ops.augmentation_sets["safe"]) and len(image_ops.augmentation_sets["safe"]) == 9
    assert {op + "_original" for op in colour} <= set(image_ops.augmentation_sets["original"])
    assert image_ops.resolve_augmentation_set(["rotate"]) == ("rotate",)
    with pytest.raises(ValueError, match="`augmentation_set`"):
        image_ops.resolve_augmentation_set("everything")
    with pytest.raises(ValueError, match="unknown"):
        image_ops.resolve_augmentation_set(["rotate", "blur"])


@pytest.mark.parametrize("quantize", [False, True])
def test_dense_and_grouped_steps_agree(quantize: bool) -> None:
    images = _smooth_images(40, 16, 16)
    ops = image_ops.augmentation_sets["all"] + ("color_original",)
    run = {
        grouped: augment.augment_batch(
            images, ops, 9, 3, torch.Generator().manual_seed(5), quantize=quantize, grouped=grouped
        )
        for grouped in (False, True)
    }
    torch.testing.assert_close(run[True], run[False], rtol=0, atol=1e-3)
    assert not torch.equal(run[True], images)


def test_augment_batch_draws_per_sample_and_reproducibly() -> None:
    images = _smooth_images(1).expand(16, -1, -1, -1)  # the same image 16 times
    first = augment.augment_batch(images, image_ops.augmentation_sets["all"], 9, 2, torch.Generator().manual_seed(3))
    again = augment.augment_batch(images, image_ops.augmentation_sets["all"], 9, 2, torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    assert len({tuple(sample.flatten().tolist()) for sample in first}) > 8  # different ops per sample
    assert first.min() >= 0 and first.max() <= 255


def test_no_op_entries_leave_samples_alone() -> None:
    images = _smooth_images(6)
    op_ids, values = augment.draw_ops(6, ("posterize",), 9, 2, (20, 24), torch.Generator().manual_seed(0))
    op_ids[:, 1::2] = -1
    for grouped in (False, True):
        out = augment.apply_ops(images, op_ids, values, ("posterize",), grouped=grouped)
        assert torch.equal(out[1::2], images[1::2]) and not torch.equal(out[0::2], images[0::2])


# Formats --------------------------------------------------------------------------------------------


def test_to_pixels_round_trips_dtypes_and_memory_format() -> None:
    uint8 = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    pixels, restore, eight_bit = pil.to_pixels(uint8)
    assert eight_bit and pixels.dtype == torch.float32 and pixels.max() <= 255
    back = restore(pixels)
    assert torch.equal(back, uint8) and back.is_contiguous(memory_format=torch.channels_last)
    half = torch.rand(3, 4, 4).half()
    pixels, restore, eight_bit = pil.to_pixels(half, single=True)
    assert not eight_bit and pixels.shape == (1, 3, 4, 4)
    assert restore(pixels).dtype == torch.float16 and restore(pixels).shape == (3, 4, 4)


def test_to_pixels_round_trips_pil_images() -> None:
    image_module, _, _ = _pil_reference()
    for mode, channels in (("RGB", 3), ("L", 1)):
        image = image_module.new(mode, (7, 5), 90 if mode == "L" else (90, 90, 90))
        pixels, restore, eight_bit = pil.to_pixels(image, single=True)
        assert eight_bit and pixels.shape == (1, channels, 5, 7) and pixels.unique().tolist() == [90.0]
        back = restore(pixels)
        assert back.mode == mode and back.size == (7, 5) and back.tobytes() == image.tobytes()
    with pytest.raises(TypeError, match="convert"):
        pil.to_pixels(image_module.new("RGBA", (4, 4)), single=True)


def test_to_pixels_rejects_what_it_cannot_augment() -> None:
    with pytest.raises(TypeError, match="uint8 or float"):
        pil.to_pixels(torch.zeros(2, 3, 4, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="normalise"):
        pil.to_pixels(torch.randn(2, 3, 8, 8) * 3)
    with pytest.raises(ValueError, match="1 or 3 channels"):
        pil.to_pixels(torch.rand(2, 4, 8, 8))
    with pytest.raises(TypeError, match="NCHW"):
        pil.to_pixels([1, 2, 3])


# Dataset transforms -----------------------------------------------------------------------------------


class _Dataset(torch.utils.data.Dataset):
    def __init__(self, transform=None):
        self.transform = transform

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        image = torch.full((3, 4, 4), 200, dtype=torch.uint8)
        return (self.transform(image) if self.transform else image), index


def _tag(name: str):
    def transform(image):
        return image

    transform.__qualname__ = name
    return transform


def test_add_dataset_transform_goes_before_to_tensor_in_a_copy() -> None:
    transforms = pytest.importorskip("torchvision.transforms")
    ours = _tag("ours")
    users = transforms.Compose(
        [transforms.CenterCrop(4), transforms.PILToTensor(), transforms.ConvertImageDtype(torch.float32)]
    )
    dataset = _Dataset(users)
    dataset_transforms.add_dataset_transform(torch.utils.data.DataLoader(dataset), ours)
    steps = dataset.transform.transforms
    assert steps[1] is ours and type(steps[2]).__name__ == "PILToTensor"
    assert len(users.transforms) == 3  # the user's Compose, maybe shared with another dataset, is untouched


def test_a_transform_added_later_runs_before_those_added_earlier() -> None:
    """As on AFTER_DATALOADER, where the method of the higher order augments the batch first: FIT_START adds the
    transforms by ascending order, so the dataset applies them in the batched path's order."""
    transforms = pytest.importorskip("torchvision.transforms")
    first, second = _tag("first"), _tag("second")
    dataset = _Dataset(transforms.Compose([transforms.CenterCrop(4), transforms.PILToTensor()]))
    for transform in (first, second):
        dataset_transforms.add_dataset_transform(torch.utils.data.DataLoader(dataset), transform)
    steps = dataset.transform.transforms
    assert steps[1] is second and steps[2] is first and type(steps[3]).__name__ == "PILToTensor"
    calls: list[str] = []
    plain = _Dataset(None)

    def recording(name: str):
        return lambda image: calls.append(name) or image

    for name in ("first", "second"):
        dataset_transforms.add_dataset_transform(torch.utils.data.DataLoader(plain), recording(name))
    plain[0]
    assert calls == ["second", "first"]  # without a Compose too


def test_add_dataset_transform_runs_first_otherwise() -> None:
    calls: list[str] = []
    dataset = _Dataset(lambda image: calls.append("users") or image)
    dataset_transforms.add_dataset_transform(
        torch.utils.data.DataLoader(dataset), lambda image: calls.append("ours") or image
    )
    dataset[0]
    assert calls == ["ours", "users"]
    plain = _Dataset(None)
    dataset_transforms.add_dataset_transform(torch.utils.data.DataLoader(plain), lambda image: image + 1)
    assert plain[0][0].unique().tolist() == [201]


def test_add_dataset_transform_rejects_what_would_not_work() -> None:
    with pytest.raises(TypeError, match="DataLoader"):
        dataset_transforms.add_dataset_transform([1, 2], _tag("ours"))
    dataset = torch.utils.data.TensorDataset(torch.zeros(2, 3, 4, 4))
    with pytest.raises(TypeError, match="no `transform` attribute"):
        dataset_transforms.add_dataset_transform(torch.utils.data.DataLoader(dataset), _tag("ours"))
    loader = torch.utils.data.DataLoader(_Dataset(), num_workers=1, persistent_workers=True)
    next(iter(loader))  # the workers now hold their own copy of the dataset
    with pytest.raises(RuntimeError, match="persistent workers"):
        dataset_transforms.add_dataset_transform(loader, _tag("ours"))


# No host synchronisation on the dense path ----------------------------------------------------------

# ops that read device values on the host, or whose output size depends on the data


def test_dense_path_never_synchronises() -> None:
    # CPU cannot show a synchronisation, so check the ops: none reads a value back or has a data-dependent
    # size, and no tensor is made from host data (after the first call has made the constants).
    images = _smooth_images(8, 16, 16)
    ops = (*image_ops.augmentation_sets["all"], *image_ops.augmentation_sets["original"])
    augment.augment_batch(images, ops, 9, 2, torch.Generator().manual_seed(0), quantize=True, grouped=False)
    with recording_ops() as names:
        augment.augment_batch(images, ops, 9, 2, torch.Generator().manual_seed(0), quantize=True, grouped=False)
    assert "grid_sampler_2d" in names and "scatter_add_" in names
    assert not names & (HOST_SYNC_OPS | {"index_copy_"})


def test_cpu_blocks_of_samples_give_the_same_result_as_one_block(monkeypatch) -> None:
    images = torch.randint(0, 256, (9, 3, 16, 16), generator=torch.Generator().manual_seed(0)).float()
    op_ids, values = augment.draw_ops(
        9, image_ops.resolve_augmentation_set("all"), 9, 3, (16, 16), torch.Generator().manual_seed(1)
    )
    whole = augment.apply_ops(images, op_ids, values, image_ops.OPS, quantize=True)
    monkeypatch.setattr(augment, "_CPU_BLOCK_BYTES", 2 * images[0].numel() * images.element_size())
    blocked = augment.apply_ops(images, op_ids, values, image_ops.OPS, quantize=True)  # blocks of 2
    assert torch.equal(whole, blocked)


@pytest.mark.parametrize("quantize", [False, True])
def test_identity_parameters_and_copies_on_the_cpu_path(quantize: bool) -> None:
    # samples whose parameters change nothing (a rotation by 0 degrees) skip their primitive there, and
    # `copies` reads every copy from the one batch: both as the dense path, which runs everything
    images = _smooth_images(6, 16, 16)
    op_ids = torch.tensor([[3, 3, 0, 1, 2, -1, 3, 7, 0, 1, 2, 4], [7, 8, 2, 2, 3, 3, 5, 6, -1, 9, 10, 11]])
    values = torch.tensor([[0.0, 5, 0, 0, 8, 0, 9, 0, 1, 1, 3, 100], [0, 3, 2, 9, 0, 4, 0.1, -0.2, 0, 1.5, 0.5, 1.2]])
    cpu = augment.apply_ops(images, op_ids, values, image_ops.OPS, quantize=quantize, copies=2)
    dense = augment.apply_ops(images, op_ids, values, image_ops.OPS, quantize=quantize, copies=2, grouped=False)
    torch.testing.assert_close(cpu, dense, rtol=0, atol=1e-3)
    assert cpu.shape == (12, 3, 16, 16) and torch.equal(cpu[0], images[0])  # rotate 0, then translate 0
    plan = augment.plan_ops(op_ids, values, 16, 16)
    each = torch.cat(
        [
            augment.apply_plan(images[j % 6 : j % 6 + 1], tuple(t[:, j : j + 1] for t in plan), quantize=quantize)
            for j in range(12)
        ]
    )
    assert torch.equal(each, cpu)
    with pytest.raises(ValueError, match="`op_ids`"):
        augment.apply_ops(images, op_ids, values, image_ops.OPS, copies=3)


@pytest.mark.parametrize("key", [*PRIMITIVES, "affine"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_place_primitives_equal_the_returning_ones_exactly(key: str, dtype: torch.dtype) -> None:
    # the CPU grouped path writes into its work buffer: the very same values, bit for bit
    images = (_smooth_images(10) + torch.rand(10, 3, 20, 24, generator=torch.Generator().manual_seed(3))).to(dtype)
    param = _matrices(10, 20, 24) if key == "affine" else _params(key, 10)
    work = images.clone()
    pixels.IN_PLACE[key](work, param)
    assert torch.equal(work, image_ops.GROUPED_PRIMITIVES[key](images, param))


def test_integer_equalize_equals_the_float_one() -> None:
    # one bincount in integers (CPU) against the scatter_add in floats: same levels, edge cases included
    images = _smooth_images(6, 17, 23)
    images[0] = 7.0  # one level only: unchanged
    images[1] = images[1] // 64 * 64  # few levels
    noisy = images + torch.rand(images.shape, generator=torch.Generator().manual_seed(4)) - 0.5
    for batch in (images, noisy, noisy.double(), images.contiguous(memory_format=torch.channels_last)):
        expected = pixels._equalize(batch)
        assert torch.equal(pixels._equalize_cpu(batch).to(batch.dtype), expected)
