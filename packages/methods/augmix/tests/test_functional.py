"""AugMix functions: the mixing limits, formats, per-sample randomness, seeds, validation."""

from __future__ import annotations

import functools

import pytest
import torch
from cadence_augmix import AugmentAndMixTransform, augmix, augmix_batch, augmix_image

from cadence.ops import augment_batch, augmentation_sets, to_pixels
from cadence.testing import HOST_SYNC_OPS, recording_ops


def _images(n: int = 8, dtype: torch.dtype = torch.uint8, size: int = 16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    coarse = torch.rand(n, 3, 4, 4, generator=generator)
    images = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear")
    return (images * 255).round().to(torch.uint8) if dtype == torch.uint8 else images.to(dtype)


def _chain(images: torch.Tensor, ops, seed: int = 0) -> torch.Tensor:
    """One depth-1 chain, drawn as augmix_batch draws its chains first from a generator seeded `seed`."""
    pixels, restore, eight_bit = to_pixels(images)
    return restore(augment_batch(pixels, ops, 3, 1, torch.Generator().manual_seed(seed), quantize=eight_bit))


def _one_chain(images: torch.Tensor, alpha: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """AugMix with a single chain of depth 1, and that chain alone (drawn from the same generator state)."""
    mixed = augmix_batch(images, depth=1, width=1, alpha=alpha, generator=torch.Generator().manual_seed(seed))
    return mixed, _chain(images, augmentation_sets["all"], seed)


def test_small_alpha_gives_the_image_or_its_chain() -> None:
    # width 1: the Dirichlet weight is 1, so out = (1 - m) x + m chain(x) with m ~ Beta(a, a). As a -> 0,
    # m concentrates on {0, 1}: each sample is (nearly) its original or (nearly) its chain, about half each.
    # a = 0.05 rather than smaller: float32 gamma draws underflow for a <~ 0.01 (see the card).
    images = _images(64, torch.float32)
    mixed, chain = _one_chain(images, alpha=0.05, seed=3)
    near_original = (mixed - images).flatten(1).abs().amax(1) < 0.02
    near_chain = (mixed - chain).flatten(1).abs().amax(1) < 0.02
    assert (near_original | near_chain).float().mean() > 0.6
    assert near_original.sum() > 5 and (near_chain & ~near_original).sum() > 5


def test_large_alpha_gives_the_even_mixture() -> None:
    # as a -> infinity, m -> 1/2: out -> (x + chain(x)) / 2
    images = _images(32, torch.float32)
    mixed, chain = _one_chain(images, alpha=1e4, seed=4)
    torch.testing.assert_close(mixed, (images + chain) / 2, rtol=0, atol=0.02)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64, torch.bfloat16])
def test_batch_keeps_shape_dtype_and_range(dtype: torch.dtype) -> None:
    images = _images(dtype=dtype)
    out = augmix_batch(images, generator=torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == dtype
    assert out.min() >= 0 and out.max() <= (255 if dtype == torch.uint8 else 1)
    assert not torch.equal(out, images)


def test_batch_keeps_channels_last() -> None:
    images = _images().contiguous(memory_format=torch.channels_last)
    assert augmix_batch(images).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("depth", [-1, 2])
def test_each_sample_is_mixed_its_own_way_and_a_seed_reproduces_it(depth: int) -> None:
    images = _images(1).expand(32, -1, -1, -1)
    first = augmix_batch(images, depth=depth, generator=torch.Generator().manual_seed(7))
    again = augmix_batch(images, depth=depth, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, again)
    assert len({sample.numpy().tobytes() for sample in first}) > 16


def test_output_is_a_convex_combination_of_the_image_and_its_chains() -> None:
    # with one deterministic op (autocontrast), every chain is autocontrast(x): out lies between x and it
    images = _images(16, torch.float32)
    out = augmix_batch(images, depth=1, augmentation_set=["autocontrast"], generator=torch.Generator().manual_seed(0))
    stretched = _chain(images, ["autocontrast"])
    low, high = torch.minimum(images, stretched), torch.maximum(images, stretched)
    assert (out >= low - 1e-6).all() and (out <= high + 1e-6).all()


def test_image_function_on_pil_and_tensors() -> None:
    image = _images(1)[0]
    out = augmix_image(image, generator=torch.Generator().manual_seed(0))
    assert out.shape == image.shape and out.dtype == torch.uint8
    as_float = augmix_image(image.float() / 255, width=2, depth=2)
    assert as_float.dtype == torch.float32 and as_float.min() >= 0 and as_float.max() <= 1
    assert augmix_image(_images(3, torch.float64)).shape == (3, 3, 16, 16)
    pil_image = pytest.importorskip("PIL.Image")
    pil = pil_image.fromarray(image.permute(1, 2, 0).numpy())
    out = augmix_image(pil, augmentation_set=augmentation_sets["safe"])
    assert isinstance(out, pil_image.Image) and out.size == pil.size


def test_transform_in_a_torchvision_pipeline() -> None:
    transforms = pytest.importorskip("torchvision.transforms")
    pil_image = pytest.importorskip("PIL.Image")
    pipeline = transforms.Compose([augmix(), transforms.ToTensor()])
    out = pipeline(pil_image.new("RGB", (12, 10), (30, 120, 200)))
    assert out.shape == (3, 10, 12)
    assert isinstance(augmix(), AugmentAndMixTransform)
    assert "severity=3, depth=-1, width=3, alpha=1.0, augmentation_set='all'" in repr(augmix())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"severity": 0}, ValueError, "`severity`=0"),
        ({"depth": 0}, ValueError, "`depth`=0"),
        ({"depth": -2}, ValueError, "-1"),
        ({"width": 0}, ValueError, "`width`=0"),
        ({"width": 2.0}, TypeError, "`width`"),
        ({"alpha": 0}, ValueError, "`alpha`=0"),
        ({"augmentation_set": "most"}, ValueError, "`augmentation_set`"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        augmix_batch(_images(2), **kwargs)
    with pytest.raises(error, match=match):
        augmix(**kwargs)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_sample_by_sample_gives_the_same_result(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    # the CPU strategy for large images (each image's whole pipeline alone) draws and computes the same
    from cadence.ops import augment

    images = _images(8, dtype).contiguous(memory_format=torch.channels_last)
    together = augmix_batch(images, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(augment, "_CPU_SAMPLE_BYTES", 0)
    one_by_one = augmix_batch(images, generator=torch.Generator().manual_seed(2))
    assert torch.equal(together, one_by_one) and one_by_one.stride() == together.stride()


def test_the_accelerator_path_never_synchronises(monkeypatch: pytest.MonkeyPatch) -> None:
    # on CPU the steps run grouped (free there); force the dense path an accelerator runs, and check that
    # no op reads a device value back, has a data-dependent size or copies host data to the device
    import cadence_augmix.functional as functional

    monkeypatch.setattr(functional, "apply_ops", functools.partial(functional.apply_ops, grouped=False))
    images = _images(8)
    augmix_batch(images, generator=torch.Generator().manual_seed(0))  # makes the cached constants
    with recording_ops() as names:
        augmix_batch(images, generator=torch.Generator().manual_seed(0))
    assert "grid_sampler_2d" in names and not names & HOST_SYNC_OPS


@pytest.mark.parametrize("function", ["batch", "image"])
def test_normalised_images_are_augmented_in_their_own_range(function: str) -> None:
    """Composer trains on normalised float images; here they are augmented as the image they normalise."""
    images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    images[:, :, 0, 0], images[:, :, 0, 1] = 0.0, 1.0  # each image's own range is exactly [0, 1]
    normalised = (images - 0.5) / 0.25  # now [-2, 2]

    def run(x: torch.Tensor) -> torch.Tensor:
        generator = torch.Generator().manual_seed(1)
        if function == "batch":
            return augmix_batch(x, generator=generator)
        return torch.stack([augmix_image(i, generator=generator) for i in x])

    out = run(normalised)
    assert out.dtype == normalised.dtype and out.shape == normalised.shape
    assert torch.allclose(out, (run(images) - 0.5) / 0.25, atol=1e-4)
    assert out.min() >= -2 and out.max() <= 2 and not torch.equal(out, normalised)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_results_do_not_share_the_reused_work_buffers(dtype: torch.dtype) -> None:
    # on CPU the steps run in per-thread buffers kept between calls: a result must not live in them
    images = _images(8, dtype)
    first = augmix_batch(images, generator=torch.Generator().manual_seed(0))
    kept = first.clone()
    second = augmix_batch(images, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, kept) and not torch.equal(first, second)
    assert torch.equal(images, _images(8, dtype))  # the input is left alone
