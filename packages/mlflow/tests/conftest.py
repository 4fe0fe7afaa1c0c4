"""Fixtures shared by the MLflow logger's tests: a fresh, already migrated SQLite store per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty SQLite store: copying it is much faster than migrating a new one per test."""
    from mlflow.tracking import MlflowClient  # lazily: the tests that need mlflow skip without it

    path = tmp_path_factory.mktemp("mlflow-template") / "template.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def sqlite_uri(tmp_path: Path, template_db: Path) -> str:
    shutil.copy(template_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
