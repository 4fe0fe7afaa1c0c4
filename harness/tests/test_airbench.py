"""The airbench-class network: its whitening layer, test-time augmentation, Lookahead, the alternating flip, and
that the shipped recipe trains it to a sensible accuracy on a subset of CIFAR-10 (or the synthetic images)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from cadence_harness.running import data as datasets
from cadence_harness.running.airbench import airbench_network, build_airbench, tta_logits, whiten_from_images
from cadence_harness.running.loaders import alternating_flip
from cadence_harness.running.lookahead import Lookahead, check_lookahead
from cadence_harness.running.models import Normalize
from cadence_harness.running.recipe import RecipeError, load_recipe
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec


def images(n: int = 256, size: int = 32) -> torch.Tensor:
    """uint8 images with structure (smooth gradients plus noise), as the loader holds them."""
    generator = torch.Generator().manual_seed(0)
    ramp = torch.linspace(0, 1, size)
    base = (ramp[None, None, :, None] * torch.rand(n, 3, 1, 1, generator=generator) + ramp[None, None, None, :]) / 2
    noisy = base + 0.2 * torch.rand(n, 3, size, size, generator=generator)
    return (noisy.clamp(0, 1) * 255).round().to(torch.uint8)


def test_the_whitening_layer_decorrelates_the_patches_it_was_fitted_to() -> None:
    x = images()
    normalize = Normalize(*datasets.ImageData(x, torch.zeros(len(x)), x, x, 10, "test").channel_stats())
    model = build_airbench(num_classes=10, in_channels=3, normalize=normalize, init_images=x)  # uint8, as in a run
    conv = model.module.net.whiten
    with torch.no_grad():
        out = conv(normalize(x)) - conv.bias.view(1, -1, 1, 1)
    half = out[:, :12].permute(0, 2, 3, 1).reshape(-1, 12)  # the 12 eigen-directions (the rest are their negatives)
    covariance = half.T @ half / len(half)
    scale = torch.diagonal(covariance)
    # whitened: uncorrelated, and unit variance along every direction whose variance is well above eps
    assert torch.allclose(covariance - torch.diag(scale), torch.zeros(12, 12), atol=1e-3)
    assert torch.all(scale > 0.5) and torch.all(scale <= 1.0 + 1e-4)
    assert torch.equal(out[:, 12:], -out[:, :12])
    assert not conv.weight.requires_grad


def test_whitening_refuses_a_conv_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="must map 3 channels to 2\\*3\\*2\\*2 = 24"):
        whiten_from_images(torch.nn.Conv2d(3, 12, 2), torch.rand(4, 3, 8, 8))


def test_batch_statistics_of_training_and_evaluation_agree_after_training() -> None:
    """The bug this guards against: whitening fitted to 0-255 images made activations 255x too small, and the
    eval-mode network (running statistics) then scored at chance while the training loss fell."""
    x, y = images(128), torch.arange(128) % 10
    normalize = Normalize([0.5] * 3, [0.25] * 3)
    model = build_airbench(num_classes=10, in_channels=3, normalize=normalize, init_images=x, widths=(16, 32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.85, nesterov=True)
    batch = (x.float() / 255, y)
    for _ in range(20):
        model.train()
        loss = model.loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        train_mode = model.module(batch[0])
        model.eval()
        eval_mode = model.module(batch[0])
    assert train_mode.argmax(1).eq(eval_mode.argmax(1)).float().mean() > 0.9


def test_test_time_augmentation_averages_the_mirror_and_one_pixel_shifts() -> None:
    network = airbench_network(widths=(8, 8, 8)).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        plain, level1, level2 = (tta_logits(network, x, level) for level in (0, 1, 2))
        mirror = 0.5 * network(x) + 0.5 * network(x.flip(-1))
        padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
        shifts = [padded[..., :32, :32], padded[..., 2:, 2:]]
        shifted = sum(0.5 * network(s) + 0.5 * network(s.flip(-1)) for s in shifts) / 2
    assert torch.equal(plain, network(x)) and torch.allclose(level1, mirror)
    assert torch.allclose(level2, 0.5 * mirror + 0.5 * shifted, atol=1e-6)


def test_the_network_accepts_the_smaller_inputs_of_progressive_resizing() -> None:
    network = airbench_network(widths=(8, 8, 8))
    assert network(torch.rand(2, 3, 16, 16)).shape == (2, 10) == network(torch.rand(2, 3, 24, 20)).shape


def test_the_alternating_flip_mirrors_each_image_in_every_other_epoch() -> None:
    x = torch.rand(64, 3, 4, 4)
    index = torch.arange(64)
    first, second = alternating_flip(x, index, 0, seed=3), alternating_flip(x, index, 1, seed=3)
    flipped_first = torch.tensor([torch.equal(a, b.flip(-1)) for a, b in zip(first, x)])
    assert all(torch.equal(a, b.flip(-1)) for a, b in zip(first, second))  # epoch 1 is epoch 0 mirrored
    assert 16 < int(flipped_first.sum()) < 48  # about half flipped in the first epoch
    assert torch.equal(alternating_flip(x, index, 2, seed=3), first)  # and it alternates


def test_lookahead_settings_are_checked_with_their_defaults() -> None:
    assert check_lookahead({})["every"] == 5
    with pytest.raises(ValueError, match=r"`optimizer\.lookahead\.every` = 0 must be an int >= 1"):
        Lookahead(every=0)
    with pytest.raises(ValueError, match="unknown key; known: every, decay, power"):
        check_lookahead({"k": 5})


def test_a_recipe_refuses_bad_optimizer_extras(tiny_recipe: Any) -> None:
    with pytest.raises(RecipeError, match=r"`optimizer\.norm_lr_scale` = 0 must be a number > 0"):
        tiny_recipe(optimizer={"name": "sgd", "lr": 0.1, "norm_lr_scale": 0})
    with pytest.raises(RecipeError, match=r"`optimizer\.lookahead\.decay` = 1\.5 must be in \[0, 1\)"):
        tiny_recipe(optimizer={"name": "sgd", "lr": 0.1, "lookahead": {"decay": 1.5}})


@pytest.mark.slow
def test_the_fast_recipe_trains_the_network_to_a_sensible_accuracy(tracking_uri: str) -> None:
    """cifar10_fast as shipped (lookahead, bias-only batch norm at 64x the rate, alternating flip, test-time
    augmentation), on the CPU at a narrower width: 2,000 CIFAR-10 images when the file is here, else the
    synthetic images; far above chance (10 %) either way."""
    try:
        datasets.load_dataset("cifar10", subset=16, eval_subset=16)
        data, subset, expected = "cifar10", 2000, 0.30
    except datasets.DataNotFoundError:
        data, subset, expected = "synthetic", 512, 0.5
    settings = {"device": "cpu", "data": data, "subset": subset, "eval_subset": 500, "duration": "6ep"}
    settings |= {"batch_size": 256, "optimizer.lr": 1.5 * 256 / 1024, "model_kwargs.widths": [32, 64, 64]}
    settings |= {"precision": "fp32", "eval_batch_size": 500, "eval_interval": "3ep", "warmup_batches": 0}
    recipe = load_recipe("cifar10_fast", settings)
    result = execute(RunSpec(recipe, (), 0), tracking_uri=tracking_uri, progress_bar=False)
    history = MlflowClient(tracking_uri).get_metric_history(result.run_id, "metrics/eval/MulticlassAccuracy")
    assert len(history) == 2 and history[-1].value > expected, [m.value for m in history]
    assert result.metrics["final/flops"] > 0 and result.metrics["final/shape_warmups"] >= 1  # the bias freeze
