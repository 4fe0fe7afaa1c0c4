"""Faults with the installed methods: hyperparameters that cannot be meant, NaN data through every method,
methods on data they do not apply to (refused on the first batch, before anything trains)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from cadence import NotApplicableError, Trainer
from cadence.nonfinite import NonFiniteLossError
from cadence.testing import tiny_image_classifier

ca = pytest.importorskip("cadence.algorithms")
cf = pytest.importorskip("cadence.functional")

INF = float("inf")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ca.MixUp(alpha=INF), "`alpha`=inf must be a finite number > 0"),
        (lambda: ca.CutMix(alpha=INF), "`alpha`=inf must be a finite number > 0"),
        (lambda: ca.AugMix(alpha=INF), "`alpha`=inf must be a finite number > 0"),
        (lambda: ca.MixUp(alpha=True), "`alpha`=True must be a finite number"),
        (lambda: ca.CutOut(length=float("nan")), "`length`=nan must be a finite number in"),
        (
            lambda: ca.RandAugment(augmentation_set=None),
            "`augmentation_set` must be a set name .* got augmentation_set=None",
        ),
        (lambda: ca.RandAugment(severity=INF), "`severity`=inf"),
        (lambda: ca.CutOut(seed="abc"), "`seed`='abc' must be an int"),
        (lambda: ca.MixUp(seed=2**70), "`seed`=1180591620717411303424 must be an int in"),
        (lambda: ca.ProgressiveResizing(mode="resze"), "`mode`='resze' must be one of 'resize', 'crop'; did you mean"),
        (lambda: ca.ColOut(batch="yes"), "`batch`='yes' must be True or False"),
        (lambda: cf.progressive_resizing_scale(elapsed=-1, width=32), "`elapsed`=-1 must be a finite number >= 0"),
        (lambda: cf.progressive_resizing_scale(elapsed=0.5, width=0), "`width`=0 must be an int >= 1"),
        (lambda: cf.should_selective_backprop(0.6, 0, interrupt=-1), "`interrupt`=-1 must be an int >= 0"),
        (lambda: cf.should_selective_backprop(0.6, 0, start=0.9, end=0.5), "`start`=0.9 must be < `end`=0.5"),
        (lambda: cf.should_selective_backprop(float("nan"), 0), "`current_duration`=nan"),
    ],
)
def test_hyperparameters_that_cannot_be_meant_are_refused_naming_them(make, words: str) -> None:
    with pytest.raises((TypeError, ValueError), match=words):
        make()


def _trainer(algorithm, dataset: Dataset, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = tiny_image_classifier()
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.05),
        algorithms=[algorithm],
        device="cpu",
        seed=0,
        progress_bar=False,
        **kwargs,
    )


def _images(poison: str) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    images, labels = torch.rand(16, 3, 16, 16, generator=generator), torch.randint(0, 4, (16,), generator=generator)
    if poison == "pixel":
        images[6, 1, 3, 4] = float("nan")  # one NaN pixel, in the second batch
    elif poison == "image":
        images[6] = float("nan")  # for methods that may drop or mask any one pixel
    return TensorDataset(images, labels)


METHODS = {
    "mixup": lambda: ca.MixUp(),
    "cutmix": lambda: ca.CutMix(),
    "progressive_resizing": lambda: ca.ProgressiveResizing(delay_fraction=0.0, finetune_fraction=0.0),
    "selective_backprop": lambda: ca.SelectiveBackprop(start=0.0, end=1.0, interrupt=0),
    "randaugment": lambda: ca.RandAugment(),
    "augmix": lambda: ca.AugMix(),
    "cutout": lambda: ca.CutOut(),
    "colout": lambda: ca.ColOut(),
    "label_smoothing": lambda: ca.LabelSmoothing(),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_nan_pixel_stops_the_run_with_any_method(name: str) -> None:
    """Never an index error deep inside an augmentation, never NaN weights trained on in silence."""
    # methods that drop pixels (ColOut, CutOut, and a nearest-neighbour downscale) may drop a lone NaN pixel
    poison = "image" if name in ("colout", "cutout", "progressive_resizing") else "pixel"
    with pytest.raises(NonFiniteLossError, match=r"the training loss is nan at step \d"):
        _trainer(METHODS[name](), _images(poison)).fit()


@pytest.mark.parametrize("name", sorted(METHODS))
def test_image_methods_on_text_batches_are_refused_before_any_step(name: str) -> None:
    class TextBatches(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> dict:
            return {"input_ids": torch.arange(6) + index, "labels": torch.tensor(index % 2)}

    trainer = _trainer(METHODS[name](), TextBatches())
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    with pytest.raises(
        NotApplicableError, match=rf"{METHODS[name]().name} .*(reads|needs) the .*dicts with keys input_ids"
    ):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))
