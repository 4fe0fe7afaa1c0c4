"""cadence's metrics keep torchmetrics' results while updating with less host work per batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchmetrics
from torch import nn

from cadence import Callback, Classifier, Trainer
from cadence.metrics import CrossEntropy, MulticlassAccuracy
from cadence.models.huggingface import LanguageCrossEntropy

STATES = ("tp", "fp", "tn", "fn")


def _pairs(count: int, classes: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    sizes = [int(n) for n in torch.randint(1, 40, (count,), generator=generator)]
    return [(torch.randn(n, classes, generator=generator), torch.randint(0, classes, (n,), generator=generator))
            for n in sizes]  # fmt: skip


@pytest.mark.parametrize("classes", [2, 7])
def test_the_direct_update_gives_torchmetrics_states_and_accuracy(classes: int) -> None:
    ours = MulticlassAccuracy(num_classes=classes, average="micro", validate_args=False)
    theirs = torchmetrics.classification.MulticlassAccuracy(num_classes=classes, average="micro", validate_args=False)
    for round_ in range(2):  # twice: reset must leave the direct update a fresh start
        for preds, target in _pairs(6, classes, seed=round_):
            ours.update(preds, target)
            theirs.update(preds, target)
        for name in STATES:
            assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
        assert torch.equal(ours.compute(), theirs.compute())
        ours.reset()
        theirs.reset()
        assert all(int(getattr(ours, name).sum()) == 0 for name in STATES)


def test_the_direct_update_never_changes_the_default_it_resets_to() -> None:
    metric = MulticlassAccuracy(num_classes=3, average="micro", validate_args=False)
    metric.update(torch.eye(3), torch.tensor([0, 1, 1]))
    assert all(int(default.sum()) == 0 for default in metric._defaults.values())


@pytest.mark.parametrize(
    "kwargs, preds, target",
    [
        ({"average": "macro"}, torch.randn(8, 3), torch.arange(8) % 3),
        ({"top_k": 2}, torch.randn(8, 3), torch.arange(8) % 3),
        ({"ignore_index": 1}, torch.randn(8, 3), torch.arange(8) % 3),
        ({"validate_args": True}, torch.randn(8, 3), torch.arange(8) % 3),
        ({}, torch.randn(8, 3).argmax(1), torch.arange(8) % 3),  # labels, not logits
        ({}, torch.randn(2, 3, 4), torch.arange(8).reshape(2, 4) % 3),  # (N, C, extra) logits
    ],
)
def test_every_other_configuration_and_input_takes_torchmetrics_update(kwargs, preds, target) -> None:
    settings = {"num_classes": 3, "average": "micro", "validate_args": False, **kwargs}
    ours, theirs = MulticlassAccuracy(**settings), torchmetrics.classification.MulticlassAccuracy(**settings)
    ours.update(preds, target)
    theirs.update(preds, target)
    assert torch.equal(ours.compute(), theirs.compute())
    for name in STATES:
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name


def test_cross_entropy_is_the_mean_over_every_sample_of_every_batch() -> None:
    """Summed per batch on the device: the mean over unequal batches, with class indices, dense targets, extra
    dimensions (one loss per position) and an unbatched sample, as ``F.cross_entropy`` over all of them."""
    generator = torch.Generator().manual_seed(0)
    logits = [torch.randn(n, 5, generator=generator) for n in (3, 8, 1)]
    indices = [torch.randint(0, 5, (len(x),), generator=generator) for x in logits]
    dense = [torch.softmax(torch.randn(len(x), 5, generator=generator), 1) for x in logits]
    for targets in (indices, dense):
        metric = CrossEntropy()
        for x, t in zip(logits, targets):
            metric.update(x, t)
        expected = torch.nn.functional.cross_entropy(torch.cat(logits), torch.cat(targets))
        assert float(metric.compute()) == pytest.approx(float(expected), rel=1e-6)
    spatial, labels = torch.randn(2, 5, 3, generator=generator), torch.randint(0, 5, (2, 3), generator=generator)
    single, label = torch.randn(5, generator=generator), torch.tensor(2)
    metric = CrossEntropy()
    metric.update(spatial, labels)
    metric.update(single, label)
    losses = torch.cat([torch.nn.functional.cross_entropy(spatial, labels, reduction="none").flatten(),
                        torch.nn.functional.cross_entropy(single, label, reduction="none").reshape(1)])  # fmt: skip
    assert float(metric.weight) == 7
    assert float(metric.compute()) == pytest.approx(float(losses.mean()), rel=1e-6)


def test_plain_attributes_skip_module_setattr_but_parameters_and_new_names_do_not() -> None:
    metric = CrossEntropy()
    metric._update_count = 5  # an existing plain attribute: stored directly
    assert metric.__dict__["_update_count"] == 5
    metric.extra = nn.Linear(2, 2)  # a new name holding a module: registered as a submodule, as torch does
    assert "extra" in metric._modules and "extra" not in metric.__dict__
    metric.scale = nn.Parameter(torch.ones(()))
    assert "scale" in metric._parameters
    with pytest.raises(RuntimeError, match="Can't change const"):
        metric.higher_is_better = True  # torchmetrics' own guard still runs


def test_language_cross_entropy_sums_tokens_across_updates() -> None:
    metric = LanguageCrossEntropy(ignore_index=-100)
    logits, target = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    target[0, :2] = -100
    metric.update(logits[:1], target[:1])
    metric.update(logits[1:], target[1:])
    kept = target != -100
    expected = torch.nn.functional.cross_entropy(logits[kept], target[kept])
    assert float(metric.compute()) == pytest.approx(float(expected), rel=1e-6)


def test_a_classifier_evaluates_to_the_accuracy_counted_by_hand() -> None:
    pairs = _pairs(5, 4, seed=3)
    model = Classifier(nn.Linear(4, 4), num_classes=4)
    trainer = Trainer(model=model, eval_dataloader=pairs, device="cpu", progress_bar=False)
    assert isinstance(trainer.state.eval_metrics["MulticlassAccuracy"], torchmetrics.classification.MulticlassAccuracy)
    results = trainer.eval()
    with torch.no_grad():
        correct = sum(int((model.module(x).argmax(1) == y).sum()) for x, y in pairs)
    assert results["MulticlassAccuracy"] == pytest.approx(correct / sum(len(y) for _, y in pairs))


class MetricsAtFitStart(Callback):
    """What metrics the trainer had built when FIT_START fired (a timer started there counts all that follows)."""

    def fit_start(self, state: Any, logger: Any) -> None:
        self.built = (set(state.built_metrics(is_train=False)), set(state.built_metrics(is_train=True)))


@pytest.mark.parametrize("evaluates", [True, False])
@pytest.mark.parametrize("train_metrics", [True, False])
def test_a_fit_builds_the_metrics_it_will_use_before_fit_start(evaluates: bool, train_metrics: bool) -> None:
    # Importing torchmetrics takes seconds on its first use. Built at the first evaluation, it fell inside the training
    # time of every clock started at FIT_START: the harness's demo run in a fresh process trained 4.5 s, not 3.1 s.
    # Train metrics built at the first batch would put the same import inside that batch.
    batches = [(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))] * 2
    model, seen = Classifier(nn.Linear(3, 2), num_classes=2), MetricsAtFitStart()
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        eval_dataloader=batches if evaluates else None,
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=[seen],
        compute_train_metrics=train_metrics,
        progress_bar=False,
    )
    trainer.fit()
    trainer.close()
    eval_names, train_names = {"MulticlassAccuracy", "CrossEntropy"}, {"MulticlassAccuracy"}
    assert seen.built == ((eval_names if evaluates else set()), (train_names if train_metrics else set()))
