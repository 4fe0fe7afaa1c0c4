"""The spill store's staging folder outlives a preparation that still migrates a store in it.

A run whose tracking server was slow at the end prepares the spill store in the background
while `finish` goes on; `finish` then releases the staging folder. Removed under the running
migration, SQLite failed with "disk I/O error" and the logger warned that the spill store could
not be prepared. The migration here is real MLflow; only its start is held back, by a gate.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow", reason="the spill store's tests need mlflow (pip install mlflow)")

from cadence_mlflow import spill


def _store(tmp_path: Path) -> tuple[spill.SpillStore, Path]:
    staging = tmp_path / "staging"
    staging.mkdir()
    store = spill.SpillStore(tmp_path / "spill", "http://127.0.0.1:9", "exp", None, staging, lambda _: None)
    return store, staging


def _prep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cadence-mlflow-spill-prep"]


def test_a_release_during_the_preparation_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gate, real_client = threading.Event(), spill.mlflow_client

    def gated_client(uri: str) -> Any:
        gate.wait(timeout=60)
        return real_client(uri)

    monkeypatch.setattr(spill, "mlflow_client", gated_client)
    store, staging = _store(tmp_path)
    running = _prep_threads()
    store.prepare()
    (thread,) = [t for t in _prep_threads() if t not in running]
    store.release_staging()  # the run ended while the migration had not started yet
    assert staging.is_dir(), "the staging folder was removed under the preparation"
    with caplog.at_level(logging.WARNING, logger=spill.__name__):
        gate.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert not staging.exists(), "the preparation did not remove the released staging folder when it ended"
    assert not [r for r in caplog.records if "could not prepare" in r.getMessage()]


def test_a_preparation_after_the_release_does_nothing(tmp_path: Path) -> None:
    store, staging = _store(tmp_path)
    store.release_staging()
    assert not staging.exists()
    running = _prep_threads()
    store.prepare()
    assert _prep_threads() == running, "a preparation started after the run released its staging folder"
    assert not staging.exists()
