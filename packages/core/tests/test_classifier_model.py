"""`Classifier` (Composer's ``ComposerClassifier``) leaves training as a deployable module: it compiles with
``torch.jit.script`` where Composer's does (``forward(self, batch: tuple[Tensor, Any])``) and exports with
``torch.export``, giving the eager model's outputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence import Classifier, ComposerClassifier


def _classifier() -> Classifier:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    return Classifier(net, num_classes=4).eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(3, 3, 16, 16, generator=generator), torch.randint(0, 4, (3,), generator=generator)


def test_composer_classifier_is_the_classifier() -> None:
    assert ComposerClassifier is Classifier


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_a_classifier_scripts_and_gives_the_eager_outputs() -> None:
    model, batch = _classifier(), _batch()
    scripted = torch.jit.script(model)
    torch.testing.assert_close(scripted(batch), model(batch), rtol=0, atol=0)


def test_a_classifier_exports_and_gives_the_eager_outputs() -> None:
    model, batch = _classifier(), _batch()
    exported = torch.export.export(model, (batch,))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(batch), model(batch))
        other = (torch.randn(3, 3, 16, 16), batch[1])  # the graph holds no captured input
        torch.testing.assert_close(exported.module()(other), model(other))


def test_eager_forward_still_takes_a_data_loaders_list() -> None:
    model, (inputs, targets) = _classifier(), _batch()
    torch.testing.assert_close(model([inputs, targets]), model((inputs, targets)))


def test_num_classes_follows_composers_rules() -> None:
    """The module's own count wins (a different argument warns); without any, both metric sets must be given."""
    import warnings

    from torchmetrics.classification import MulticlassAccuracy

    module = torch.nn.Linear(4, 3)
    module.num_classes = 3  # type: ignore[assignment]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Classifier(module, num_classes=5).num_classes == 3
    assert "num_classes=5 does not match module.num_classes=3; using 3" in str(caught[0].message)
    metrics = {"acc": MulticlassAccuracy(num_classes=3)}
    given = Classifier(torch.nn.Linear(4, 3), train_metrics=metrics, val_metrics=metrics)
    assert given.num_classes is None and list(given.get_metrics()) == ["acc"]
    with pytest.raises(ValueError, match=r"num_classes=None: .* or both train_metrics and val_metrics"):
        Classifier(torch.nn.Linear(4, 3), train_metrics=metrics)
