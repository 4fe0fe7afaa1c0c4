"""Checkpoint faults: missing or dangling pointers, damaged files, foreign files, runs that do not fit.

Every test checks the outcome and the message, and that no checkpoint was lost or overwritten.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Trainer
from cadence import checkpoint as ckpt
from cadence._snapshot import CheckpointMismatchError
from cadence.checkpoint import CheckpointError
from cadence.testing import assert_same_tensors, mlp_classifier


def _trainer(folder: Path | None, *, optimizer: str = "sgd", hidden: int = 8, **kwargs) -> Trainer:
    data = torch.Generator().manual_seed(5)
    dataset = TensorDataset(torch.randn(32, 6, generator=data), torch.randint(0, 3, (32,), generator=data))
    torch.manual_seed(0)
    model = mlp_classifier(6, 3, hidden=hidden)
    optimizers = {
        "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        "adam": lambda: torch.optim.Adam(model.parameters(), lr=0.01),
    }[optimizer]()
    args = {
        "model": model,
        "train_dataloader": DataLoader(dataset, batch_size=4, shuffle=True),  # 8 batches per epoch
        "optimizers": optimizers,
        "max_duration": "2ep",
        "save_folder": folder,
        "save_interval": "2ba",
        "seed": 7,
        "progress_bar": False,
    }
    return Trainer(**{**args, **kwargs})


def _digests(folder: Path) -> dict[str, str]:
    """File name -> content hash of every checkpoint in `folder` (to prove none was lost or rewritten)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in ckpt.list_checkpoints(folder)}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trainer]:
    """A run of 16 batches with a checkpoint every 2 and at each epoch end, and its final state."""
    folder = tmp_path_factory.mktemp("run")
    trainer = _trainer(folder)
    trainer.fit()
    return folder, trainer


def _copy_run(source: Path, target: Path, keep_until_batch: int) -> Path:
    """The checkpoints of `source` up to `keep_until_batch`, as if the run had stopped there."""
    target.mkdir()
    for path in ckpt.list_checkpoints(source):
        if int(path.stem.split("-ba")[1]) <= keep_until_batch:
            (target / path.name).write_bytes(path.read_bytes())
    return target


@pytest.mark.parametrize("pointer", ["missing", "dangling"])
def test_autoresume_without_a_usable_latest_pointer_resumes_from_the_newest_checkpoint(
    finished_run: tuple[Path, Trainer], tmp_path: Path, pointer: str
) -> None:
    source, whole = finished_run
    folder = _copy_run(source, tmp_path / "run", keep_until_batch=10)  # ep0-ba8.pt, ep1-ba10.pt are the newest
    if pointer == "dangling":
        os.symlink("ep9-ba99.pt", folder / ckpt.LATEST)  # points at a file that is gone
    before = _digests(folder)
    resumed = _trainer(folder, autoresume=True)
    assert resumed.state.timestamp.batch == 10  # not from scratch
    resumed.fit()
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    after = _digests(folder)
    assert {name: after[name] for name in before} == before  # every checkpoint it found is still there, unchanged


def test_a_truncated_newest_checkpoint_is_skipped_with_a_warning_and_kept(
    finished_run: tuple[Path, Trainer], tmp_path: Path
) -> None:
    source, whole = finished_run
    folder = _copy_run(source, tmp_path / "run", keep_until_batch=12)
    newest = folder / "ep1-ba12.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a copy cut short
    damaged, good = newest.read_bytes(), _digests(folder)
    with pytest.warns(RuntimeWarning, match=r"autoresume skips .*ep1-ba12\.pt: it is damaged or truncated.*ep1-ba10"):
        resumed = _trainer(folder, autoresume=True)
    assert resumed.state.timestamp.batch == 10
    assert newest.read_bytes() == damaged  # skipped, not deleted
    resumed.fit()  # writes a new ep1-ba12.pt when it gets there
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    after = _digests(folder)
    assert all(after[name] == digest for name, digest in good.items() if name != "ep1-ba12.pt")


def test_when_no_checkpoint_loads_autoresume_refuses_and_deletes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    only = folder / "ep0-ba2.pt"
    torch.save({"format": 1, "model": {"w": torch.zeros(1000)}}, only)
    only.write_bytes(only.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"(?s)none of them loads.*ep0-ba2\.pt: it is damaged or truncated"):
        _trainer(folder, autoresume=True)
    assert only.exists() and only.stat().st_size == 100


def test_a_fresh_run_in_a_folder_with_checkpoints_is_refused(finished_run: tuple[Path, Trainer]) -> None:
    folder, _ = finished_run
    before = _digests(folder)
    with pytest.raises(ValueError, match=r"already holds checkpoints; pass autoresume=True.*save_overwrite=True"):
        _trainer(folder)
    assert _digests(folder) == before


def test_loading_an_older_checkpoint_into_a_folder_with_newer_ones_needs_save_overwrite(
    finished_run: tuple[Path, Trainer], tmp_path: Path
) -> None:
    source, _ = finished_run
    folder = _copy_run(source, tmp_path / "run", keep_until_batch=16)
    with pytest.raises(ValueError, match=r"holds checkpoints past the one loaded.*ep1-ba10\.pt.*save_overwrite=True"):
        _trainer(folder, load_path=folder / "ep0-ba8.pt")
    _trainer(folder, load_path=folder / "ep0-ba8.pt", save_overwrite=True)  # explicit: allowed


def test_stale_temporary_files_of_a_killed_writer_are_removed_on_resume(tmp_path: Path) -> None:
    """A real process SIGKILLed inside torch.save leaves a temporary file; the next start removes it."""
    folder = tmp_path / "run"
    _trainer(folder, max_duration="2ba").fit()  # ep0-ba2.pt
    script = textwrap.dedent(
        f"""
        import os, signal, torch
        from cadence import checkpoint as ckpt

        def dies_while_writing(payload, handle):
            handle.write(b"x" * 100_000)
            handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = dies_while_writing
        ckpt.save_checkpoint({{"format": 1}}, {str(folder)!r}, "ep0-ba4.pt")
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    temporary = [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert len(temporary) == 1 and temporary[0].name.startswith(".ep0-ba4.pt.")
    before = _digests(folder)
    resumed = _trainer(folder, autoresume=True, max_duration="4ba")
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert _digests(folder) == before and resumed.state.timestamp.batch == 2


def test_load_path_to_a_damaged_file_names_it(finished_run: tuple[Path, Trainer], tmp_path: Path) -> None:
    source, _ = finished_run
    bad = tmp_path / "cut.pt"
    bad.write_bytes((source / "ep1-ba10.pt").read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=rf"cannot use checkpoint {bad}: it is damaged or truncated"):
        _trainer(None, load_path=bad)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"empty\.pt: the file is empty"):
        _trainer(None, load_path=empty)


def test_random_bytes_are_not_a_checkpoint_and_the_message_never_advises_weights_only_false(tmp_path: Path) -> None:
    noise = tmp_path / "noise.pt"
    noise.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(CheckpointError, match=r"noise\.pt: not a cadence checkpoint") as raised:
        _trainer(None, load_path=noise)
    assert "weights_only=False will likely succeed" not in str(raised.value)
    assert "torch's reason" in str(raised.value)


class _RunsCode:
    """A pickle payload that would create a file if it ever ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_a_file_carrying_python_objects_is_refused_without_running_them(tmp_path: Path, writer: str) -> None:
    marker, evil = tmp_path / "pwned", tmp_path / "evil.pt"
    payload = {"format": 1, "model": _RunsCode(marker)}
    if writer == "pickle":
        evil.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, evil)
    with pytest.raises(CheckpointError, match="contains Python objects that a checkpoint never holds; refusing") as e:
        _trainer(None, load_path=evil)
    assert "Do not load it with weights_only=False" in str(e.value)
    assert not marker.exists()  # the payload never ran


def test_a_torch_file_that_is_no_run_checkpoint_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "weights.pt"
    torch.save(mlp_classifier(6, 3, hidden=8).state_dict(), weights)
    with pytest.raises(CheckpointError, match=r"not a cadence checkpoint: it holds a .*without cadence's 'format'"):
        _trainer(None, load_path=weights)


def test_a_checkpoint_of_another_model_shape_names_the_mismatch(finished_run: tuple[Path, Trainer]) -> None:
    folder, _ = finished_run
    with pytest.raises(CheckpointMismatchError, match=r"(?s)model weights do not fit this model.*size mismatch"):
        _trainer(None, hidden=9, load_path=folder / "ep1-ba10.pt")


def test_a_checkpoint_of_another_optimizer_names_both(finished_run: tuple[Path, Trainer]) -> None:
    folder, _ = finished_run
    with pytest.raises(CheckpointMismatchError, match=r"optimizer 0 of the checkpoint is SGD and this run's is Adam"):
        _trainer(None, optimizer="adam", load_path=folder / "ep1-ba10.pt")


def test_an_old_checkpoint_without_optimizer_types_still_fails_clearly(
    finished_run: tuple[Path, Trainer], tmp_path: Path
) -> None:
    source, _ = finished_run
    payload = torch.load(source / "ep1-ba10.pt", weights_only=True)
    del payload["optimizer_types"]  # as an older cadence wrote them
    older = tmp_path / "older.pt"
    torch.save(payload, older)
    with pytest.raises(CheckpointMismatchError, match=r"state of optimizer 0 .* does not fit this run's Adam"):
        _trainer(None, optimizer="adam", load_path=older)
