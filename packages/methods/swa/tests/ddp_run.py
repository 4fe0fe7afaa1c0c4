"""A run for test_ddp.py, launched with torchrun (2 gloo processes, 4 samples per rank per step).

    torchrun --nproc_per_node 2 ddp_run.py OUT_DIR

SWA averages every batch of the second epoch and closes the window at the last batch. Every rank writes
OUT_DIR/rank{r}.pt: its final model and the BatchNorm statistics torch's update_bn computes for those
weights on this rank's own shard of the replayed epoch.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from cadence_swa import SWA, training_batches
from torch.optim.swa_utils import update_bn

from cadence import Trainer, exit_without_finalization
from cadence.testing import image_dataset, tiny_image_classifier


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    model = tiny_image_classifier()
    trainer = Trainer(
        model=model,
        train_dataloader=torch.utils.data.DataLoader(image_dataset(16), batch_size=4, shuffle=True),
        max_duration="2ep",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[SWA(swa_start="0.5dur", swa_end="1.0dur", update_interval="1ba")],
        seed=5,
        device="cpu",
        progress_bar=False,
    )
    trainer.fit()
    local = copy.deepcopy(model.module)  # this rank's statistics alone, for the averaged weights
    update_bn([x for x, _ in training_batches(trainer.state.dataloader, 1, torch.device("cpu"))], local)
    result = {"model": model.state_dict(), "local": dict(local.named_buffers()), "world": trainer.state.world_size}
    torch.save(result, out / f"rank{trainer.state.rank}.pt")


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run (cadence.distributed)
