"""A training run used by test_checkpoint.py: optionally SIGKILLs itself right after a checkpoint.

    python resume_run.py FOLDER OUT [--kill-at BATCH] [--workers N]

It trains with everything that must survive a resume: shuffled data, dropout (global RNG),
a method with its own generator, Adam state and a warm-up + cosine schedule; with ``--workers``,
DataLoader worker processes and a dataset whose samples draw random noise. At the end it
saves the final model and optimizer state and every logged loss to OUT.
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from cadence import Algorithm, Callback, Effects, Event, InMemoryLogger, Resource, Trainer
from cadence.ops import MethodRNG
from cadence.schedulers import CosineAnnealingWithWarmupScheduler
from cadence.testing import mlp_classifier


class InputNoise(Algorithm):
    """Adds Gaussian noise drawn from the method's own generator."""

    events = (Event.INIT, Event.AFTER_DATALOADER)

    def __init__(self, std: float = 0.1):
        self.std = std
        self.rng = MethodRNG("input_noise")

    def match(self, event, state):
        return True

    def apply(self, event, state, logger):
        if event is Event.INIT:
            self.rng.setup(state)
            return
        x = state.batch_get_item(0)
        noise = torch.randn(x.shape, generator=self.rng.generator, dtype=x.dtype, device=x.device)
        state.batch_set_item(0, x + self.std * noise)

    def effects(self):
        return Effects(reads={Resource.INPUTS}, writes={Resource.INPUTS})

    def state_dict(self):
        return {"rng": self.rng.state_dict()}

    def load_state_dict(self, state):
        self.rng.load_state_dict(state["rng"])


class NoisySamples(Dataset):
    """A random transform of each sample, drawn from the global RNG of whichever process reads it."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int):
        return self.inputs[index] + 0.1 * torch.randn(self.inputs.shape[1:]), self.labels[index]


class KillAfterCheckpoint(Callback):
    def __init__(self, batch: int):
        self.batch = batch

    def batch_checkpoint(self, state, logger):
        if state.timestamp.batch == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()

    data = torch.Generator().manual_seed(3)
    inputs, labels = torch.randn(96, 16, generator=data), torch.randint(0, 4, (96,), generator=data)
    dataset = NoisySamples(inputs, labels) if args.workers else TensorDataset(inputs, labels)
    torch.manual_seed(0)
    model = mlp_classifier(16, 4, hidden=32, dropout=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=8, shuffle=True, num_workers=args.workers),  # 12 batches
        max_duration="3ep",
        optimizers=optimizer,
        schedulers=CosineAnnealingWithWarmupScheduler(t_warmup="5ba"),
        algorithms=[InputNoise()],
        callbacks=[KillAfterCheckpoint(args.kill_at)] if args.kill_at else [],
        loggers=[logger],
        save_folder=args.folder,
        save_interval="1ba",
        autoresume=True,
        seed=1234,
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    steps, losses = logger.steps_and_values("loss/train/total")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "steps": steps,
            "losses": losses,
            "lr": optimizer.param_groups[0]["lr"],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
