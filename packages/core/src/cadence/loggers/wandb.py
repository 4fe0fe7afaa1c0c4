"""`WandBLogger`: metrics, hyperparameters and files in a Weights & Biases run (Composer's destination).

Needs the ``wandb`` package, 0.21.4 or newer (``pip install 'cadence[wandb]'``); it is imported when the run
starts, never on ``import cadence``. The run starts on AFTER_LOAD (the run's name is final once
a checkpoint is loaded), or at the first logged value when no trainer drives the logger. For a
run without network, pass ``init_kwargs={"mode": "offline"}`` or set ``WANDB_MODE=offline``;
``wandb sync`` uploads it later.

The W&B run's id is checkpointed: a cadence run resumed from a checkpoint continues the same W&B
run (``resume="allow"``) instead of starting a second one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cadence.loggers.destination import LoggerDestination
from cadence.ops.checks import check_bool

if TYPE_CHECKING:
    from cadence.loggers.logger import Logger
    from cadence.state import State

__all__ = ["WandBLogger"]


def _plain(value: Any) -> Any:
    """Tensors as Python numbers (one element) or lists; wandb serialises anything else itself."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as error:
        raise ImportError("WandBLogger needs the wandb package: pip install 'cadence[wandb]'") from error
    return wandb


class WandBLogger(LoggerDestination):
    """Logs to Weights & Biases: metrics with ``run.log(..., step=batch)``, hyperparameters into ``run.config``.

    Args:
        project, group, name, entity, tags: the W&B run's; `name` defaults to the trainer's run name.
        log_artifacts: upload the files given to ``log_artifact`` as W&B artifacts.
        rank_zero_only: accepted for Composer compatibility; cadence's trainer only logs on rank 0.
        init_kwargs: more arguments for ``wandb.init`` (``mode``, ``dir``, ``config``, ...); the named
            arguments above take precedence.
    """

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        name: str | None = None,
        entity: str | None = None,
        tags: Sequence[str] | None = None,
        log_artifacts: bool = False,
        rank_zero_only: bool = True,
        init_kwargs: Mapping[str, Any] | None = None,
    ):
        if init_kwargs is not None and not isinstance(init_kwargs, Mapping):
            raise TypeError(
                f"init_kwargs={init_kwargs!r} must be a dict of wandb.init arguments, e.g. {{'mode': 'offline'}}"
            )
        self.log_artifacts = check_bool("log_artifacts", log_artifacts)
        self.rank_zero_only = check_bool("rank_zero_only", rank_zero_only)
        named: dict[str, Any] = {"project": project, "group": group, "name": name, "entity": entity}
        named["tags"] = list(tags) if tags is not None else None
        self.init_kwargs: dict[str, Any] = {**(init_kwargs or {}), **{k: v for k, v in named.items() if v is not None}}
        self.run: Any = None
        self._run_name = "run"
        self._run_id: str | None = None  # the W&B run this logger writes (or will continue, after a load)

    # The run -------------------------------------------------------------------------------------
    def init(self, state: State, logger: Logger) -> None:
        self._run_name = state.run_name

    def after_load(self, state: State, logger: Logger) -> None:
        self._run_name = state.run_name
        self._start()

    def _start(self) -> Any:
        if self.run is None:
            wandb = _import_wandb()
            kwargs = {"name": self._run_name, **self.init_kwargs}
            if self._run_id is not None and "id" not in kwargs:
                kwargs.update(id=self._run_id, resume=kwargs.get("resume", "allow"))
            self.run = wandb.init(**kwargs)
            self._run_id = self.run.id
        return self.run

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self._run_id} if self._run_id is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._run_id = state.get("run_id")

    # Logging -------------------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        self._start().log({name: _plain(value) for name, value in metrics.items()}, step=step)

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        self._start().config.update({name: _plain(value) for name, value in params.items()}, allow_val_change=True)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        if not self.log_artifacts:
            return
        wandb = _import_wandb()
        path = Path(path)
        artifact = wandb.Artifact(name=(name or path.name).replace("/", "-"), type="file")
        artifact.add_file(str(path))
        self._start().log_artifact(artifact)

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        """End the W&B run: exit code 0 when FINISHED, 1 when FAILED or KILLED."""
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)
            self.run = None
