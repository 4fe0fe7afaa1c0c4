"""A run used by test_ddp.py, launched either plainly or with torchrun.

    python ddp_run.py OUT_DIR                      # one process, global batch 16
    torchrun --nproc_per_node 2 ddp_run.py OUT_DIR  # two processes, 8 per rank
    torchrun --nproc_per_node 2 ddp_run.py OUT_DIR compile  # the same, DDP module torch.compile'd (eager backend)

Every rank writes OUT_DIR/rank{r}.pt: the final weights (rank 0), eval results before and
after training, and how many metrics its logger received.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import InMemoryLogger, Trainer
from cadence.distributed import exit_without_finalization, get_world_size, initialize_from_environment
from cadence.testing import mlp_classifier

GLOBAL_BATCH = 16


def main() -> None:
    out = Path(sys.argv[1])
    initialize_from_environment(torch.device("cpu"))
    world = get_world_size()
    data = torch.Generator().manual_seed(11)
    train = TensorDataset(torch.randn(64, 8, generator=data), torch.randint(0, 4, (64,), generator=data))
    evaluation = TensorDataset(torch.randn(1001, 8, generator=data), torch.randint(0, 4, (1001,), generator=data))
    torch.manual_seed(0)
    model = mlp_classifier(8, 4, hidden=16)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(train, batch_size=GLOBAL_BATCH // world, shuffle=True),
        eval_dataloader=DataLoader(evaluation, batch_size=100),
        max_duration="3ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
        loggers=[logger],
        save_folder=out / "checkpoints",
        save_interval="1ep",
        seed=5,
        device="cpu",
        progress_bar=False,
        compile_config={"backend": "eager"} if sys.argv[2:] == ["compile"] else None,
    )
    before = trainer.eval()
    trainer.fit()
    after = trainer.eval()
    rank = trainer.state.rank
    torch.save(
        {
            "model": model.state_dict(),
            "before": before,
            "after": after,
            "logged": len(logger.data),
            "world": world,
            "batches": trainer.state.timestamp.batch,
        },
        out / f"rank{rank}.pt",
    )


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run (cadence.distributed)
