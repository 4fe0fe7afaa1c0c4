"""A SAM run for test_ddp.py, launched with torchrun (2 gloo processes, 4 samples per rank per step).

    torchrun --nproc_per_node 2 ddp_run.py OUT_DIR

Every rank writes OUT_DIR/rank{r}.pt: the initial and final weights and the batches it trained on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from cadence_sam import SAM
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, Event, State, Trainer, exit_without_finalization
from cadence.testing import mlp_classifier


class Batches(Callback):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def run_event(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.AFTER_DATALOADER:
            self.seen.append([t.clone() for t in state.batch])


def main() -> None:
    out = Path(sys.argv[1])
    data = torch.Generator().manual_seed(3)
    train = TensorDataset(torch.randn(24, 6, generator=data), torch.randint(0, 3, (24,), generator=data))
    torch.manual_seed(0)
    model = mlp_classifier(6, 3, hidden=8)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    batches = Batches()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(train, batch_size=4, shuffle=True),
        max_duration="3ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.5),
        algorithms=[SAM(rho=0.5)],
        callbacks=[batches],
        seed=5,
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    state = {"initial": initial, "final": model.state_dict(), "batches": batches.seen}
    torch.save(state, out / f"rank{trainer.state.rank}.pt")


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run (cadence.distributed)
