"""Checkpoints: exact resume (also after SIGKILL in another process), atomic writes, strict loads."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Trainer
from cadence import checkpoint as ckpt
from cadence.testing import assert_same_tensors, mlp_classifier

SCRIPT = Path(__file__).with_name("resume_run.py")


def _run(folder: Path, out: Path, kill_at: int | None = None, workers: int = 0) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), str(folder), str(out), "--workers", str(workers)]
    if kill_at is not None:
        command += ["--kill-at", str(kill_at)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


# workers=2: DataLoader worker processes and a dataset whose samples draw random noise
@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2], ids=["main-process", "2-workers"])
def test_sigkilled_run_autoresumes_bitwise_equal(tmp_path: Path, workers: int) -> None:
    whole = _run(tmp_path / "whole", tmp_path / "whole.pt", workers=workers)
    assert whole.returncode == 0, whole.stderr
    killed = _run(tmp_path / "split", tmp_path / "split.pt", kill_at=17, workers=workers)  # mid-epoch 2
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "split.pt").exists()
    assert ckpt.find_latest(tmp_path / "split").name == "ep1-ba17.pt"
    resumed = _run(tmp_path / "split", tmp_path / "split.pt", workers=workers)
    assert resumed.returncode == 0, resumed.stderr

    a = torch.load(tmp_path / "whole.pt", weights_only=True)
    b = torch.load(tmp_path / "split.pt", weights_only=True)
    assert_same_tensors(a["model"], b["model"], "model")
    assert_same_tensors(a["optimizer"], b["optimizer"], "optimizer")
    assert b["steps"] == list(range(18, 37))  # the resumed process logged batches 18..36 only
    assert b["losses"] == a["losses"][17:]  # and every loss equals the uninterrupted run's
    assert a["lr"] == b["lr"]


def _trainer(folder: Path | None = None, **kwargs) -> Trainer:
    data = torch.Generator().manual_seed(5)
    dataset = TensorDataset(torch.randn(40, 6, generator=data), torch.randint(0, 3, (40,), generator=data))
    torch.manual_seed(0)
    model = mlp_classifier(6, 3, hidden=8, dropout=0.1)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4, shuffle=True),
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        max_duration="2ep",
        save_folder=folder,
        seed=7,
        progress_bar=False,
        **kwargs,
    )


def test_resuming_three_times_equals_never_resuming(tmp_path: Path) -> None:
    whole = _trainer()
    whole.fit()
    load_path = None
    for step, stop in enumerate(["3ba", "10ba", "13ba", "2ep"]):  # 13 = 10 + 3 crosses the epoch boundary
        part = _trainer(tmp_path / f"part{step}", save_interval="1ba", load_path=load_path)
        part.state.max_duration = type(part.state.max_duration).from_input(stop)
        part.fit()
        load_path = ckpt.find_latest(tmp_path / f"part{step}")
    assert_same_tensors(whole.state.model.state_dict(), part.state.model.state_dict(), "model")
    assert_same_tensors(whole.state.optimizers[0].state_dict(), part.state.optimizers[0].state_dict(), "optimizer")
    assert part.state.timestamp == whole.state.timestamp.__class__(
        **{
            **whole.state.timestamp.state_dict(),
            "total_wct": part.state.timestamp.total_wct,
            "epoch_wct": part.state.timestamp.epoch_wct,
            "batch_wct": part.state.timestamp.batch_wct,
        }
    )


def test_checkpoint_holds_everything_and_loads_weights_only(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, save_interval="5ba", save_num_checkpoints_to_keep=2)
    trainer.fit()
    kept = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    # saved at batches 5, 10, 15, 20 (before EPOCH_END) and at the end of fit (after it); the oldest deleted
    assert kept == ["ep1-ba20.pt", "ep2-ba20.pt"]
    payload = torch.load(tmp_path / "latest.pt", weights_only=True)
    assert {
        "model",
        "optimizers",
        "schedulers",
        "scaler",
        "timestamp",
        "algorithms",
        "callbacks",
        "rng",
        "train_metrics",
        "rank_zero_seed",
        "run_name",
        "format",
    } <= set(payload)
    assert payload["timestamp"]["batch"] == 20 and payload["rank_zero_seed"] == 7
    assert {"python", "torch", "numpy"} <= set(payload["rng"][0])


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    ckpt.save_checkpoint({"value": torch.tensor(1)}, tmp_path, "ep0-ba1.pt")

    def torn_save(payload, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint({"value": torch.tensor(2)}, tmp_path, "ep0-ba2.pt")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0-ba1.pt", "latest.pt"]  # no temp file left
    assert ckpt.load_checkpoint(tmp_path / "latest.pt")["value"].item() == 1


def test_refuses_to_overwrite_and_loads_strictly(tmp_path: Path) -> None:
    _trainer(tmp_path, save_interval="1ep").fit()
    with pytest.raises(ValueError, match="already holds checkpoints; pass autoresume=True"):
        _trainer(tmp_path)
    data = TensorDataset(torch.randn(8, 6), torch.zeros(8, dtype=torch.long))
    other = mlp_classifier(6, 3, hidden=9)  # different shapes
    with pytest.raises(RuntimeError, match="size mismatch"):
        Trainer(
            model=other,
            train_dataloader=DataLoader(data, batch_size=4),
            max_duration="1ep",
            optimizers=torch.optim.SGD(other.parameters(), lr=0.1),
            load_path=tmp_path / "latest.pt",
            progress_bar=False,
        )
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        _trainer(load_path=tmp_path / "missing.pt")
