"""cadence-mlflow reaches the core only through its entry point: ``from cadence.loggers import MLFlowLogger``."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points


def test_mlflow_logger_resolves_through_the_loggers_group_to_the_plugin_class() -> None:
    (entry_point,) = [e for e in entry_points(group="cadence.loggers") if e.name == "MLFlowLogger"]
    assert entry_point.value == "cadence_mlflow:MLFlowLogger"
    assert entry_point.dist is not None and entry_point.dist.name == "cadence-mlflow"

    import cadence_mlflow
    from cadence.loggers import MLFlowLogger

    assert MLFlowLogger is cadence_mlflow.MLFlowLogger


def test_listing_the_loggers_loads_no_plugin() -> None:
    """``dir()`` names the installed plugins from their metadata; only asking for one imports its package."""
    code = (
        "import sys, cadence.loggers as L; names = dir(L); "
        "print('MLFlowLogger' in names, 'cadence_mlflow' in sys.modules, 'mlflow' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "False", "False"]
