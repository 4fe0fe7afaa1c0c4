"""ProgressiveResizing adapter: the schedule over a run, batch keys, targets, validation."""

from __future__ import annotations

import pytest
import torch
from cadence_progressive_resizing import ProgressiveResizing

from cadence import Event, InMemoryLogger, Logger, Resource, State, Timestamp
from cadence.testing import tiny_image_classifier


def _apply(algorithm: ProgressiveResizing, batch: object, at_batch: int = 0, max_duration: str | None = "10ba"):
    state = State(model=tiny_image_classifier(), max_duration=max_duration)
    state.batch = batch
    state.timestamp = Timestamp(batch=at_batch, batch_in_epoch=at_batch)
    destination = InMemoryLogger()
    assert algorithm.match(Event.AFTER_DATALOADER, state)
    algorithm.apply(Event.AFTER_DATALOADER, state, Logger(state, [destination]))
    return state, destination


def test_matches_only_after_dataloader() -> None:
    """Composer's ProgressiveResizing runs on AFTER_DATALOADER and on no other event (INIT included)."""
    state = State(model=tiny_image_classifier())
    assert [e for e in Event if ProgressiveResizing().match(e, state)] == [Event.AFTER_DATALOADER]


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("epoch_frac", [0.0, 0.6, 0.8, 1.0])
def test_composers_schedule_at_whole_epochs(mode: str, epoch_frac: float) -> None:
    """Composer's test_apply (initial 0.5, finetune 0.2, delay 0.2, increment 8, 32 px, max_duration 100ep), with the
    timestamp set the supported way (Composer's test writes the private ``Time._value``)."""
    state = State(model=tiny_image_classifier(), max_duration="100ep")
    state.timestamp = Timestamp(epoch=int(epoch_frac * 100))
    state.batch = (torch.randn(16, 8, 32, 32), torch.randn(16, 8, 32, 32))
    destination = InMemoryLogger()
    ProgressiveResizing(mode, 0.5, 0.2, 0.2, 8).apply(Event.AFTER_DATALOADER, state, Logger(state, [destination]))
    elapsed = min((epoch_frac - 0.2) / (1 - 0.2 - 0.2), 1.0) if epoch_frac >= 0.2 else 0.0
    pinned = round(32 * (0.5 + 0.5 * elapsed) / 8) * 8
    assert state.batch[0].shape == (16, 8, pinned, pinned)
    metrics = destination.most_recent_values  # Composer's three keys
    assert (metrics["progressive_resizing/height"], metrics["progressive_resizing/width"]) == (pinned, pinned)
    assert metrics["progressive_resizing/scale_factor"] == pytest.approx(pinned / 32)


def test_default_resize_is_composers_nearest_and_bilinear_is_an_option() -> None:
    x = torch.rand(2, 3, 16, 16)
    nearest, _ = _apply(ProgressiveResizing(), (x, torch.arange(2)))
    assert torch.equal(nearest.batch[0], x[..., ::2, ::2])  # nearest at 1/2: every other pixel
    smooth, _ = _apply(ProgressiveResizing(interpolation="bilinear"), (x, torch.arange(2)))
    assert smooth.batch[0].shape == (2, 3, 8, 8) and not torch.equal(smooth.batch[0], x[..., ::2, ::2])


def test_crop_generator_resumes_from_a_checkpoint_even_when_reused() -> None:
    """The loaded generator state survives the run's first batch, also for an instance that already ran."""
    x = torch.rand(2, 3, 16, 16)

    def crops(algorithm: ProgressiveResizing, count: int) -> list[torch.Tensor]:
        state = State(model=tiny_image_classifier(), max_duration="10ba")  # one run
        out = []
        for _ in range(count):
            state.batch = (x, torch.arange(2))
            algorithm.apply(Event.AFTER_DATALOADER, state, Logger(state))
            out.append(state.batch[0])
        return out

    first = ProgressiveResizing(mode="crop", seed=3)
    crops(first, 1)
    saved = first.state_dict()
    expected = crops(ProgressiveResizing(mode="crop", seed=3), 2)[1]  # the uninterrupted run's second crop
    for resumed in (ProgressiveResizing(mode="crop", seed=3), first):
        resumed.load_state_dict(saved)
        assert torch.equal(crops(resumed, 1)[0], expected)


def test_dict_batch_and_segmentation_targets() -> None:
    batch = {"x": torch.rand(2, 3, 16, 16), "mask": torch.randint(0, 3, (2, 16, 16))}
    algorithm = ProgressiveResizing(mode="crop", resize_targets=True, input_key="x", target_key="mask")
    state, _ = _apply(algorithm, batch)
    assert state.batch["x"].shape == (2, 3, 8, 8) and state.batch["mask"].shape == (2, 8, 8)
    assert batch["x"].shape == (2, 3, 16, 16)  # the user's batch is not changed in place


def test_targets_are_not_read_unless_resized() -> None:
    state, _ = _apply(ProgressiveResizing(input_key="x"), {"x": torch.rand(2, 3, 16, 16)})
    assert state.batch["x"].shape == (2, 3, 8, 8)


def test_keeps_channels_last() -> None:
    x = torch.rand(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    state, _ = _apply(ProgressiveResizing(), (x, torch.arange(2)))
    assert state.batch[0].is_contiguous(memory_format=torch.channels_last)


def test_needs_max_duration() -> None:
    with pytest.raises(ValueError, match="max_duration"):
        _apply(ProgressiveResizing(), (torch.rand(1, 3, 8, 8), torch.arange(1)), max_duration=None)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial_scale": 1.5}, "`initial_scale`"),
        ({"initial_scale": 0.0}, "`initial_scale`"),
        ({"finetune_fraction": -0.1}, "`finetune_fraction`"),
        ({"delay_fraction": 1.2}, "`delay_fraction`"),
        ({"delay_fraction": 0.6, "finetune_fraction": 0.5}, "must be <= 1"),
        ({"size_increment": 0}, "`size_increment`"),
        ({"mode": "bicubic"}, "`mode`"),
        ({"interpolation": "area"}, "`interpolation`"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProgressiveResizing(**kwargs)


def test_effects_and_repr() -> None:
    assert ProgressiveResizing().effects().writes == {Resource.INPUTS}
    assert ProgressiveResizing(resize_targets=True).effects().writes == {Resource.INPUTS, Resource.TARGETS}
    assert repr(ProgressiveResizing()) == (
        "ProgressiveResizing(mode='resize', initial_scale=0.5, finetune_fraction=0.2, delay_fraction=0.5, "
        "size_increment=4, resize_targets=False, input_key=0, target_key=1, interpolation='nearest', seed=None)"
    )
