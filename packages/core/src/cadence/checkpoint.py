"""Checkpoint files: atomic writes, a ``latest`` pointer, safe loads with clear errors, resumable runs.

A checkpoint is a ``torch.save`` of plain containers and tensors, so it loads with
``weights_only=True``: loading one can never execute code. What it holds is `cadence._snapshot`'s
business; this module only moves files:

* `save_checkpoint` writes through a temporary file and a rename, so a crash leaves the old
  checkpoint or the new one, never a torn file; `remove_stale_temp_files` clears what a killed
  writer left behind.
* `load_checkpoint` raises `CheckpointError` naming the file and saying what is wrong (missing,
  empty, damaged or truncated, not a checkpoint, carrying Python objects), never torch's advice
  to load with ``weights_only=False``.
* `find_resumable` picks the newest checkpoint of a folder that loads, from the checkpoint files
  themselves (``latest.pt`` may be missing or dangling), warning about each it skips.
* `CheckpointNames` is the file-name pattern (``ep{epoch}-ba{batch}.pt`` unless the trainer's
  ``save_filename`` says otherwise), which both writes names and reads positions back from them.
"""

from __future__ import annotations

import os
import pickletools
import re
import shutil
import string
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "LATEST",
    "SHARDED_PAYLOAD",
    "CheckpointError",
    "CheckpointNames",
    "checkpoint_position",
    "checkpoint_to_start_from",
    "find_latest",
    "find_resumable",
    "keep_newest",
    "list_checkpoints",
    "load_checkpoint",
    "load_run_checkpoint",
    "point_latest_at",
    "remove_stale_temp_files",
    "save_checkpoint",
]

LATEST = "latest.pt"
SHARDED_PAYLOAD = "cadence.pt"  # the run (all but the weights) in a sharded checkpoint's folder
_FIELDS = {  # the fields a save_filename may use, and what each reads back as
    "epoch": r"\d+",
    "batch": r"\d+",
    "batch_in_epoch": r"\d+",
    "sample": r"\d+",
    "token": r"\d+",
    "rank": r"\d+",
    "run_name": r".+?",
}


@dataclass(frozen=True)
class CheckpointNames:
    """A checkpoint file-name pattern such as ``"ep{epoch}-ba{batch}.pt"`` (the default) or Composer's
    ``"ep{epoch}-ba{batch}-rank{rank}.pt"``.

    It must contain ``{epoch}`` and ``{batch}``: autoresume, ``save_num_checkpoints_to_keep`` and the
    overwrite checks read a run's position back from its files' names. Other fields: ``{batch_in_epoch}``,
    ``{sample}``, ``{token}``, ``{rank}``, ``{run_name}``.
    """

    pattern: str = "ep{epoch}-ba{batch}.pt"
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = self.pattern
        if not isinstance(pattern, str):
            raise TypeError(f"save_filename={pattern!r} must be a string such as 'ep{{epoch}}-ba{{batch}}.pt'")
        try:
            parts = list(string.Formatter().parse(pattern))
        except ValueError as error:
            raise ValueError(f"save_filename={pattern!r} is not a format string: {error}") from None
        names = [name for _, name, _, _ in parts if name is not None]
        unknown = [name for name in names if name not in _FIELDS]
        if unknown or "/" in pattern or pattern in ("", LATEST) or pattern.startswith("."):
            problem = f"unknown field(s) {', '.join(repr(n) for n in unknown)}" if unknown else "not a plain file name"
            raise ValueError(
                f"save_filename={pattern!r}: {problem}; use a file name with the fields {', '.join(_FIELDS)}"
            )
        if {"epoch", "batch"} - set(names):
            raise ValueError(
                f"save_filename={pattern!r} must contain {{epoch}} and {{batch}}: autoresume and "
                "save_num_checkpoints_to_keep read the position back from the names"
            )
        regex, captured = "", set()
        for text, name, _, _ in parts:
            regex += re.escape(text)
            if name in ("epoch", "batch") and name not in captured:  # the position is read from the first one
                captured.add(name)
                regex += f"(?P<{name}>{_FIELDS[name]})"
            elif name:
                regex += _FIELDS[name]
        object.__setattr__(self, "_regex", re.compile(f"^{regex}$"))

    def name_for(self, timestamp: Any, state: Any = None) -> str:
        """The file name of a checkpoint at `timestamp` (a `Timestamp`) of the run `state` (rank, run name)."""
        return self.pattern.format(
            epoch=int(timestamp.epoch),
            batch=int(timestamp.batch),
            batch_in_epoch=int(timestamp.batch_in_epoch),
            sample=int(timestamp.sample),
            token=int(timestamp.token),
            rank=getattr(state, "rank", 0),
            run_name=getattr(state, "run_name", ""),
        )

    def position(self, name: str) -> tuple[int, int] | None:
        """(epoch, batch) read from a file name of this pattern, or None for other names."""
        match = self._regex.match(name)
        return (int(match.group("epoch")), int(match.group("batch"))) if match else None

    def is_temp_file(self, name: str) -> bool:
        """A file `save_checkpoint` writes before renaming it: ``.<name>.<random>.tmp``."""
        if not (name.startswith(".") and name.endswith(".tmp")):
            return False
        stem = name[1:-4].rsplit(".", 1)[0]
        return stem == LATEST or self.position(stem) is not None


DEFAULT_NAMES = CheckpointNames()
_OBJECT_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "REDUCE", "BUILD"}


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used: the message names the file, what is wrong and what to do."""

    def __init__(self, path: str | Path, reason: str, detail: str = ""):
        self.path, self.reason = Path(path), reason
        message = f"cannot use checkpoint {self.path}: {reason}"
        super().__init__(f"{message}\n  torch's reason: {detail}" if detail else message)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(payload: dict[str, Any], folder: str | Path, filename: str) -> Path:
    """Write `payload` to ``folder/filename`` atomically, then point ``latest.pt`` at it.

    A crash at any moment leaves either the previous checkpoint or the new one, never a
    torn file, and ``latest.pt`` only ever names a complete checkpoint.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / filename
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{filename}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    point_latest_at(folder, filename)
    return target


def point_latest_at(folder: Path, filename: str) -> None:
    """Replace ``folder/latest.pt`` by a link to `filename` (a checkpoint file or sharded folder), atomically."""
    link_tmp = folder / f".{LATEST}.{os.getpid()}.tmp"
    link_tmp.unlink(missing_ok=True)
    os.symlink(filename, link_tmp)
    os.replace(link_tmp, folder / LATEST)
    _fsync_dir(folder)


def remove_stale_temp_files(folder: str | Path, names: CheckpointNames = DEFAULT_NAMES) -> list[Path]:
    """Delete the temporary files (and sharded folders) a killed writer left in `folder` (never a checkpoint)."""
    removed = []
    for path in Path(folder).glob(".*.tmp"):
        if names.is_temp_file(path.name) and (path.is_file() or path.is_dir()) and not path.is_symlink():
            _remove(path)
            removed.append(path)
    return removed


def _remove(path: Path) -> None:
    """A checkpoint file, or a sharded checkpoint's folder."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# Loading -------------------------------------------------------------------------------------
def load_checkpoint(path: str | Path) -> Any:
    """What ``torch.save`` wrote to `path`, loaded safely; `CheckpointError` (naming the file and why) otherwise."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "the file is empty (a copy cut short, or a full disk when it was written)")
    try:
        with warnings.catch_warnings():  # torch warns about protocols of plain pickles it is about to refuse
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(path, *_diagnose(path, error)) from None


def load_run_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint a `Trainer` wrote (see `cadence._snapshot`); any other file is refused, naming it.

    A sharded checkpoint (a folder, `cadence._sharded_checkpoint`) gives the run without its weights,
    marked ``"sharded": True``; the weights load from the folder into the model as it is sharded then.
    """
    payload = _read_sharded_payload(Path(path)) if Path(path).is_dir() else load_checkpoint(path)
    if not isinstance(payload, dict) or "format" not in payload:
        kind = type(payload).__name__
        keys = f" with keys {sorted(map(str, payload))[:8]}" if isinstance(payload, dict) else ""
        raise CheckpointError(path, f"not a cadence checkpoint: it holds a {kind}{keys}, without cadence's 'format'")
    return payload


def _read_sharded_payload(path: Path) -> Any:
    """The run of the sharded checkpoint folder `path` (its ``cadence.pt``), once the folder is complete."""
    from cadence._dcp_metadata import read_dcp_metadata

    for part, what in ((".metadata", "DCP's .metadata"), (SHARDED_PAYLOAD, SHARDED_PAYLOAD)):
        if not (path / part).is_file():
            raise CheckpointError(path, f"a sharded checkpoint folder without {what}: incomplete, or no checkpoint")
    try:
        read_dcp_metadata(path / ".metadata")
    except Exception as error:  # damaged, or naming code to run: never unpickled by torch's own reader
        raise CheckpointError(path, f"its DCP .metadata cannot be used ({type(error).__name__}: {error})") from None
    return load_checkpoint(path / SHARDED_PAYLOAD)


def _diagnose(path: Path, error: Exception) -> tuple[str, str]:
    """(what is wrong, torch's own words) for a file ``torch.load(weights_only=True)`` refused."""
    detail = _torch_reason(error)
    with path.open("rb") as handle:
        head = handle.read(4)
    if head == b"PK\x03\x04":  # a torch.save zip archive
        if "Unsupported global" in detail:
            return _OBJECTS, detail
        return "it is damaged or truncated (its zip archive cannot be read); use an older checkpoint", detail
    kind = _pickle_kind(path)
    if kind == "objects":
        return _OBJECTS, detail
    if kind == "pickle":
        return "not a cadence checkpoint: a plain pickle, not a file written by torch.save", detail
    return "not a cadence checkpoint: not a file written by torch.save", detail


_OBJECTS = (
    "it contains Python objects that a checkpoint never holds; refusing to load it (loading would call "
    "classes or functions the file names). Do not load it with weights_only=False unless you trust whoever wrote it"
)


def _torch_reason(error: Exception) -> str:
    """The technical part of torch's message, without its advice to load with ``weights_only=False``."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text[text.index(marker) + len(marker) :]
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return first[:300]


def _pickle_kind(path: Path, limit: int = 1 << 24) -> str:
    """ "objects" for a pickle that would build Python objects, "pickle" for a plain one, "" for neither.

    Reads the opcodes with `pickletools` (which executes nothing).
    """
    data = path.read_bytes()[:limit]
    try:
        names = {opcode.name for opcode, _, _ in pickletools.genops(data)}
    except Exception:
        return ""
    return "objects" if names & _OBJECT_OPCODES else "pickle"


# Finding checkpoints ---------------------------------------------------------------------------
def checkpoint_position(path: str | Path, names: CheckpointNames = DEFAULT_NAMES) -> tuple[int, int] | None:
    """(epoch, batch) from a checkpoint's name (``ep<E>-ba<B>.pt`` by default), or None for other names."""
    return names.position(Path(path).name)


def list_checkpoints(folder: str | Path, names: CheckpointNames = DEFAULT_NAMES) -> list[Path]:
    """Checkpoints in `folder` named by `names`, oldest first (by batch, then epoch)."""
    found = []
    for path in Path(folder).glob("*"):
        position = checkpoint_position(path, names)
        if position is not None and not path.is_symlink():
            found.append(((position[1], position[0]), path))
    return [path for _, path in sorted(found)]


def keep_newest(folder: str | Path, keep: int, names: CheckpointNames = DEFAULT_NAMES) -> None:
    """Delete all but the `keep` newest checkpoints of `folder` (-1 keeps all)."""
    if keep > 0:
        for old in list_checkpoints(folder, names)[:-keep]:
            _remove(old)


def find_latest(folder: str | Path) -> Path | None:
    """The checkpoint ``latest.pt`` points at, when it exists (see `find_resumable` to resume)."""
    latest = Path(folder) / LATEST
    return latest.resolve() if latest.exists() else None


def find_resumable(folder: str | Path, names: CheckpointNames = DEFAULT_NAMES) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of `folder` that loads, and its payload; None when the folder holds none.

    Each newer one that does not load is skipped with a warning naming it and why, and left
    as it is. When checkpoints exist but none loads, `CheckpointError` lists them all: starting
    over would silently lose the run.
    """
    candidates = list_checkpoints(folder, names)
    failures = []
    for path in reversed(candidates):
        try:
            payload = load_run_checkpoint(path)
        except CheckpointError as error:
            failures.append(error)
            continue
        for skipped in failures:
            warnings.warn(
                f"autoresume skips {skipped.path}: {skipped.reason}. Resuming from {path.name} instead; the "
                f"skipped file is left as it is, and this run writes a new checkpoint when it gets there",
                RuntimeWarning,
                stacklevel=3,
            )
        return path, payload
    if failures:
        listed = "\n".join(f"  {error.path.name}: {error.reason}" for error in failures)
        raise CheckpointError(
            folder,
            f"autoresume found {len(failures)} checkpoint(s) and none of them loads:\n{listed}\n"
            "Restore a good copy, or move them out of the folder to start the run over",
        )
    return None


def checkpoint_to_start_from(
    save_folder: Path | None,
    load_path: str | Path | None,
    autoresume: bool,
    save_overwrite: bool,
    names: CheckpointNames = DEFAULT_NAMES,
) -> tuple[Path, dict[str, Any]] | None:
    """(path, payload) a run starts from: `save_folder`'s newest loadable checkpoint with `autoresume`,
    else `load_path`, else None; never a choice that would overwrite another run's checkpoints.

    Refused (ValueError) unless ``save_overwrite``: a fresh run in a folder holding checkpoints,
    and a run loaded from `load_path` into a folder holding checkpoints past it. Temporary files a
    killed writer left in `save_folder` are removed first.
    """
    existing: list[Path] = []
    if save_folder is not None:
        remove_stale_temp_files(save_folder, names)
        existing = list_checkpoints(save_folder, names)
        if autoresume and existing:
            found = find_resumable(save_folder, names)
            if found is not None:
                return found
        if existing and load_path is None and not save_overwrite:
            raise ValueError(
                f"save_folder={str(save_folder)!r} already holds checkpoints; pass autoresume=True to "
                "continue that run, choose an empty folder, or pass save_overwrite=True to write over them"
            )
    if load_path is None:
        return None
    payload = load_run_checkpoint(load_path)
    loaded = (payload["timestamp"]["batch"], payload["timestamp"]["epoch"])
    newer = [path for path in existing if (checkpoint_position(path, names) or (0, 0))[::-1] > loaded]
    if newer and not save_overwrite:
        raise ValueError(
            f"save_folder={str(save_folder)!r} holds checkpoints past the one loaded from {load_path} "
            f"({', '.join(p.name for p in newer[:3])}{', ...' if len(newer) > 3 else ''}); this run would write "
            "over them. Use another save_folder, or pass save_overwrite=True"
        )
    return Path(load_path), payload
