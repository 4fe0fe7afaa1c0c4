"""RandAugment functions: formats, per-sample randomness, seeds, the per-image reference, validation."""

from __future__ import annotations

import functools

import pytest
import torch
from cadence_randaugment import RandAugmentTransform, randaugment, randaugment_batch, randaugment_image

from cadence.ops import augmentation_sets
from cadence.testing import HOST_SYNC_OPS, recording_ops


def _images(n: int = 8, dtype: torch.dtype = torch.uint8, size: int = 16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    coarse = torch.rand(n, 3, 4, 4, generator=generator)
    images = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear")
    return (images * 255).round().to(torch.uint8) if dtype == torch.uint8 else images.to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64, torch.float16])
def test_batch_keeps_shape_dtype_and_range(dtype: torch.dtype) -> None:
    images = _images(dtype=dtype)
    out = randaugment_batch(images, generator=torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == dtype and out.device == images.device
    top = 255 if dtype == torch.uint8 else 1
    assert out.min() >= 0 and out.max() <= top
    assert not torch.equal(out, images)


def test_batch_keeps_channels_last() -> None:
    images = _images().contiguous(memory_format=torch.channels_last)
    out = randaugment_batch(images, generator=torch.Generator().manual_seed(0))
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_each_sample_draws_its_own_ops_and_a_seed_reproduces_them() -> None:
    images = _images(1).expand(32, -1, -1, -1)
    first = randaugment_batch(images, generator=torch.Generator().manual_seed(7))
    again = randaugment_batch(images, generator=torch.Generator().manual_seed(7))
    other = randaugment_batch(images, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert len({sample.numpy().tobytes() for sample in first}) > 16


@pytest.mark.parametrize("op", ["autocontrast", "equalize"])
def test_deterministic_ops_match_the_per_image_function(op: str) -> None:
    # no magnitude to draw: the batched and the per-image paths must give identical images
    images = _images(6)
    batched = randaugment_batch(images, depth=2, augmentation_set=[op], generator=torch.Generator().manual_seed(0))
    alone = torch.stack([randaugment_image(image, depth=2, augmentation_set=[op]) for image in images])
    assert torch.equal(batched, alone) and not torch.equal(batched, images)


def test_depth_composes_ops() -> None:
    # posterize twice keeps min(bits) bits: still a valid posterized image (multiples of 2 ** (8 - 4))
    images = _images(16)
    out = randaugment_batch(images, depth=3, augmentation_set=["posterize"], generator=torch.Generator().manual_seed(0))
    assert (out.int() % 16 == 0).all()


def test_image_function_on_pil_and_tensors() -> None:
    image = _images(1)[0]
    generator = torch.Generator().manual_seed(0)
    out = randaugment_image(image, generator=generator)
    assert out.shape == image.shape and out.dtype == torch.uint8
    as_float = randaugment_image(image.float() / 255)
    assert as_float.dtype == torch.float32 and as_float.min() >= 0 and as_float.max() <= 1
    batch = randaugment_image(_images(3, torch.float64))
    assert batch.shape == (3, 3, 16, 16) and batch.dtype == torch.float64
    pil_image = pytest.importorskip("PIL.Image")
    pil = pil_image.fromarray(image.permute(1, 2, 0).numpy())
    out = randaugment_image(pil, severity=5, depth=1, augmentation_set=augmentation_sets["safe"])
    assert isinstance(out, pil_image.Image) and out.size == pil.size and out.mode == "RGB"


def test_transform_in_a_torchvision_pipeline() -> None:
    transforms = pytest.importorskip("torchvision.transforms")
    pil_image = pytest.importorskip("PIL.Image")
    pipeline = transforms.Compose([randaugment(), transforms.ToTensor()])
    out = pipeline(pil_image.new("RGB", (12, 10), (30, 120, 200)))
    assert out.shape == (3, 10, 12) and out.dtype == torch.float32
    assert isinstance(randaugment(), RandAugmentTransform)
    assert "severity=9, depth=2, augmentation_set='all'" in repr(randaugment())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"severity": 0}, ValueError, "`severity`=0"),
        ({"severity": 11}, ValueError, r"\[1, 10\]"),
        ({"severity": "9"}, TypeError, "`severity`"),
        ({"depth": 0}, ValueError, "`depth`=0"),
        ({"depth": 1.5}, TypeError, "`depth`"),
        ({"augmentation_set": "most"}, ValueError, "`augmentation_set`='most'"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        randaugment_batch(_images(2), **kwargs)
    with pytest.raises(error, match=match):
        randaugment(**kwargs)


def test_integer_images_are_refused() -> None:
    with pytest.raises(TypeError, match="uint8 or float"):
        randaugment_batch(torch.zeros(4, 3, 8, 8, dtype=torch.int32))


def _full_range_images(n: int) -> torch.Tensor:
    """Float images in [0, 1] whose own range is exactly [0, 1] (one black and one white pixel each)."""
    images = torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    images[:, :, 0, 0], images[:, :, 0, 1] = 0.0, 1.0
    return images


@pytest.mark.parametrize("function", ["batch", "image"])
def test_normalised_images_are_augmented_in_their_own_range(function: str) -> None:
    """Composer trains on normalised float images; here they are augmented as the image they normalise."""
    images = _full_range_images(4)
    normalised = (images - 0.5) / 0.25  # each image's range is now [-2, 2]

    def run(x: torch.Tensor) -> torch.Tensor:
        generator = torch.Generator().manual_seed(1)
        if function == "batch":
            return randaugment_batch(x, generator=generator)
        return torch.stack([randaugment_image(i, generator=generator) for i in x])

    out = run(normalised)
    assert out.dtype == normalised.dtype and out.shape == normalised.shape
    assert torch.allclose(out, (run(images) - 0.5) / 0.25, atol=1e-4)
    assert out.min() >= -2 and out.max() <= 2 and not torch.equal(out, normalised)


def test_the_accelerator_path_never_synchronises(monkeypatch: pytest.MonkeyPatch) -> None:
    # on CPU the steps run grouped (free there); force the dense path an accelerator runs, and check that
    # no op reads a device value back, has a data-dependent size or copies host data to the device
    import cadence_randaugment.functional as functional

    monkeypatch.setattr(functional, "augment_batch", functools.partial(functional.augment_batch, grouped=False))
    images = _images(8)
    randaugment_batch(images, generator=torch.Generator().manual_seed(0))  # makes the cached constants
    with recording_ops() as names:
        randaugment_batch(images, generator=torch.Generator().manual_seed(0))
    assert "grid_sampler_2d" in names and not names & HOST_SYNC_OPS


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_sample_by_sample_gives_the_same_result(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    # the CPU strategy for large images (each image's whole pipeline alone) draws and computes the same
    from cadence.ops import augment

    images = _images(16, dtype).contiguous(memory_format=torch.channels_last)
    together = randaugment_batch(images, depth=3, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(augment, "_CPU_SAMPLE_BYTES", 0)
    one_by_one = randaugment_batch(images, depth=3, generator=torch.Generator().manual_seed(2))
    assert torch.equal(together, one_by_one) and one_by_one.stride() == together.stride()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_results_do_not_share_the_reused_work_buffers(dtype: torch.dtype) -> None:
    # on CPU the steps run in per-thread buffers kept between calls: a result must not live in them
    images = _images(8, dtype)
    first = randaugment_batch(images, generator=torch.Generator().manual_seed(0))
    kept = first.clone()
    second = randaugment_batch(images, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, kept) and not torch.equal(first, second)
    assert torch.equal(images, _images(8, dtype))  # the input is left alone
