"""`timm_model`: timm architectures by name, wrapped in a `Classifier`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cadence import Classifier, Trainer
from cadence.models import timm_model

pytest.importorskip("timm")


def test_builds_a_classifier_with_the_requested_head() -> None:
    model = timm_model("resnet18", num_classes=4, in_chans=1)
    assert isinstance(model, Classifier) and model.num_classes == 4
    logits = model((torch.randn(2, 1, 32, 32), torch.tensor([0, 1])))
    assert logits.shape == (2, 4)


def test_unknown_names_suggest_close_matches() -> None:
    with pytest.raises(ValueError, match=r"model_name='resnet181' is not a timm model; close matches: .*resnet18"):
        timm_model("resnet181", num_classes=4)


def test_rejects_a_bad_num_classes() -> None:
    with pytest.raises(ValueError, match="num_classes=1"):
        timm_model("resnet18", num_classes=1)


def test_trains_two_steps() -> None:
    model = timm_model("resnet18", num_classes=3)
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.rand(4, 3, 32, 32, generator=generator), torch.tensor([0, 1, 2, 0])) for _ in range(2)]
    trainer = Trainer(
        model=model,
        train_dataloader=batches,
        max_duration="2ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    assert trainer.state.timestamp.batch == 2
    trainer.close()


def test_import_cadence_does_not_import_timm() -> None:
    code = "import sys, cadence; print('timm' in sys.modules, 'cadence.models.timm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"
