"""should_selective_backprop's window, and select_using_loss: how many, which, and how it scores."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cadence_selective_backprop import select_indices_using_loss, select_using_loss, should_selective_backprop


@pytest.mark.parametrize(
    ("duration", "batch_idx", "start", "end", "interrupt", "expected"),
    [
        (0.0, 0, 0.5, 0.9, 2, False),  # before the window
        (0.49, 0, 0.5, 0.9, 2, False),
        (0.5, 0, 0.5, 0.9, 2, True),  # the window opens at start (inclusive)
        (0.5, 1, 0.5, 0.9, 2, False),  # (1 + 1) % 2 == 0: an interrupt batch trains on everything
        (0.7, 2, 0.5, 0.9, 2, True),
        (0.7, 3, 0.5, 0.9, 2, False),
        (0.7, 1, 0.5, 0.9, 3, True),
        (0.7, 2, 0.5, 0.9, 3, False),  # (2 + 1) % 3 == 0
        (0.7, 1, 0.5, 0.9, 0, True),  # interrupt=0: never interrupted
        (0.7, 3, 0.5, 0.9, 1, False),  # interrupt=1: every batch is an interrupt
        (0.9, 0, 0.5, 0.9, 2, False),  # the window closes at end (exclusive)
        (1.0, 0, 0.0, 1.0, 0, False),
        (0.0, 0, 0.0, 1.0, 0, True),
        (10, 0, 5, 15, 0, True),  # Composer's tests: the window in epochs
        (10, 2, 5, 15, 2, True),
        (0, 0, 5, 15, 0, False),
        (20, 0, 5, 15, 0, False),
        (10, 1, 5, 15, 2, False),
    ],
)
def test_should_selective_backprop_truth_table(
    duration: float, batch_idx: int, start: float, end: float, interrupt: int, expected: bool
) -> None:
    assert should_selective_backprop(duration, batch_idx, start, end, interrupt) is expected


def _identity_model(x: torch.Tensor) -> torch.Tensor:
    return x


def _loss_is_first_feature(outputs: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    losses = outputs.reshape(outputs.shape[0], -1)[:, 0]
    return losses if reduction == "none" else losses.mean()


@pytest.mark.parametrize("num_samples", [2, 3, 7, 10, 16])
@pytest.mark.parametrize("keep", [0.1, 0.25, 0.5, 0.9])
def test_keeps_int_keep_times_n_and_at_least_one(num_samples: int, keep: float) -> None:
    x, y = torch.rand(num_samples, 5), torch.arange(num_samples)
    new_x, new_y = select_using_loss(x, y, _identity_model, _loss_is_first_feature, keep)
    expected = max(1, int(keep * num_samples))
    assert new_x.shape == (expected, 5) and new_y.shape == (expected,)
    assert torch.equal(new_x, x[new_y])  # inputs and targets stay paired
    assert len(set(new_y.tolist())) == expected  # without replacement


@pytest.mark.parametrize("scale_factor", [0.5, 0.75])
def test_scoring_pass_can_downsample(scale_factor: float) -> None:
    seen: list[tuple[int, ...]] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        assert not torch.is_grad_enabled()
        return x

    x, y = torch.rand(8, 3, 16, 16), torch.arange(8)
    new_x, _ = select_using_loss(x, y, model, _loss_is_first_feature, 0.5, scale_factor)
    assert seen == [(8, 3, int(16 * scale_factor), int(16 * scale_factor))]
    assert new_x.shape == (4, 3, 16, 16)  # kept samples stay full size


def test_prefers_high_loss_samples() -> None:
    """With keep = 0.5 the rank weights are p ** 1: the hardest sample is picked far more often."""
    num_samples, trials = 10, 1000
    losses = torch.randperm(num_samples, generator=torch.Generator().manual_seed(0)).float()
    x, y = losses[:, None], torch.arange(num_samples)
    generator = torch.Generator().manual_seed(1)
    counts = torch.zeros(num_samples)
    for _ in range(trials):
        kept = select_indices_using_loss(x, y, _identity_model, _loss_is_first_feature, 0.5, generator=generator)
        counts[kept] += 1
    by_loss = counts[losses.argsort()] / trials  # inclusion frequency, from the easiest to the hardest sample
    assert by_loss[-1] > 0.7 and by_loss[0] < 0.2
    assert by_loss[5:].sum() > 1.6 * by_loss[:5].sum()
    assert torch.corrcoef(torch.stack([by_loss, torch.arange(num_samples).float()]))[0, 1] > 0.95


def test_same_seed_same_selection() -> None:
    x, y = torch.rand(16, 4), torch.arange(16)
    picks = [
        select_indices_using_loss(
            x, y, _identity_model, _loss_is_first_feature, generator=torch.Generator().manual_seed(3)
        )
        for _ in range(2)
    ]
    assert torch.equal(picks[0], picks[1])


def test_per_pixel_losses_are_averaged_per_sample() -> None:
    def pixel_loss(outputs: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(outputs, target, reduction=reduction)

    x, y = torch.randn(6, 3, 4, 4), torch.randint(0, 3, (6, 4, 4))
    new_x, new_y = select_using_loss(x, y, _identity_model, pixel_loss, 0.5)
    assert new_x.shape == (3, 3, 4, 4) and new_y.shape == (3, 4, 4)


def test_keeping_everything_skips_the_scoring_pass() -> None:
    def never(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the model must not run when nothing is dropped")

    x, y = torch.rand(1, 3, 4, 4), torch.arange(1)
    new_x, new_y = select_using_loss(x, y, never, _loss_is_first_feature, 0.5)  # int(0.5 * 1) == 0 -> keep 1
    assert new_x is x and new_y is y
    assert select_using_loss(torch.rand(4, 2), torch.arange(4), never, _loss_is_first_feature, 1.0)[0].shape[0] == 4


def test_bad_arguments_raise() -> None:
    x, y = torch.rand(4, 5), torch.arange(4)
    with pytest.raises(ValueError, match="`start`=15 must be < `end`=5"):
        should_selective_backprop(10, 0, 15, 5)
    with pytest.raises(ValueError, match="`start`"):
        should_selective_backprop(10, 0, -1, 5)
    with pytest.raises(ValueError, match="`scale_factor`"):
        select_using_loss(x, y, _identity_model, _loss_is_first_feature, 0.5, 0.5)  # 2-D cannot be downsampled
    with pytest.raises(ValueError, match="`scale_factor`"):
        select_using_loss(torch.rand(4, 3, 8, 8), y, _identity_model, _loss_is_first_feature, 0.5, 2.0)
    for keep in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="`keep`"):
            select_using_loss(x, y, _identity_model, _loss_is_first_feature, keep)
    with pytest.raises(TypeError, match=r"must take a keyword argument `reduction`\."):  # Composer's words
        select_using_loss(x, y, _identity_model, lambda outputs, target: outputs.sum())
    with pytest.raises(TypeError, match="reduction"):
        select_using_loss(x, y, _identity_model, "cross_entropy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per-sample"):
        select_using_loss(x, y, _identity_model, lambda o, t, reduction="mean": o.sum())
