"""Start-up: ``import cadence`` and building a Trainer import only what the run uses.

torchmetrics' package ``__init__`` imports scipy, matplotlib, torchvision and transformers whenever they are
installed (seconds of start-up, torchmetrics issue #3457), so the trainer builds its metrics on first use:
a run that never evaluates never imports it. Each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = ("torchmetrics", "transformers", "scipy", "matplotlib", "torchvision", "timm", "mlflow", "PIL", "pandas")


def _modules_after(code: str) -> set[str]:
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(name for name in HEAVY if name in modules)


def test_import_cadence_and_a_trainer_import_no_heavy_library() -> None:
    modules = _modules_after(
        """
        import torch
        from cadence import Classifier, Trainer
        model = Classifier(torch.nn.Linear(4, 2), num_classes=2)
        batches = [(torch.randn(2, 4), torch.tensor([0, 1]))] * 3
        trainer = Trainer(model=model, train_dataloader=batches, max_duration="3ba", device="cpu", progress_bar=False)
        trainer.fit()
        """
    )
    assert _heavy(modules) == [], "a run without evaluation imported heavy libraries"


def test_the_first_evaluation_imports_torchmetrics_and_still_no_transformers_module_of_cadence() -> None:
    """Metrics are built when first used; the evaluation then works as before (torchmetrics is imported)."""
    modules = _modules_after(
        """
        import torch
        from cadence import Classifier, Trainer
        model = Classifier(torch.nn.Linear(4, 2), num_classes=2)
        batches = [(torch.randn(2, 4), torch.tensor([0, 1]))] * 3
        trainer = Trainer(model=model, train_dataloader=batches, eval_dataloader=batches, max_duration="3ba",
                          device="cpu", progress_bar=False)
        assert "torchmetrics" not in __import__("sys").modules
        trainer.fit()
        assert set(trainer.state.eval_metrics) == {"MulticlassAccuracy", "CrossEntropy"}
        """
    )
    assert "torchmetrics" in modules
    assert "cadence.models.huggingface" not in modules
