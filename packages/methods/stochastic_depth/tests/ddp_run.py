"""A run for test_algorithm.py, launched with ``torchrun --nproc_per_node 2 ddp_run.py OUT [control]``.

Block-mode stochastic depth under DDP (gloo) with 2 microbatches per batch. Every rank writes
OUT/rank{r}.pt: its final parameters and how often each block's branch ran. ``control`` runs a
subclass that hides ``find_unused_parameters`` from the trainer, with every rank dropping the same
blocks: DDP must then fail on the parameters a dropped block left without gradients.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from cadence_stochastic_depth import StochasticDepth, is_stochastic
from torch.utils.data import DataLoader, TensorDataset
from torchvision.models.resnet import BasicBlock, ResNet

from cadence import Classifier, Trainer, exit_without_finalization


class HiddenUnusedParameters(StochasticDepth):
    @property
    def find_unused_parameters(self) -> bool:
        return False


def main() -> None:
    out, control = Path(sys.argv[1]), sys.argv[2:] == ["control"]
    data = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.rand(32, 3, 32, 32, generator=data), torch.randint(0, 4, (32,), generator=data))
    torch.manual_seed(0)
    model = Classifier(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=4), num_classes=4)
    method = HiddenUnusedParameters if control else StochasticDepth
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=8),
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.05),
        algorithms=[method("ResNetBasicBlock", drop_rate=0.9 if control else 0.5, seed=0 if control else None)],
        device_train_microbatch_size=4,
        seed=1,
        device="cpu",
        progress_bar=False,
    )
    blocks = [m for m in model.modules() if is_stochastic(m)]  # torchvision's blocks, in Composer's layout
    calls = [0] * len(blocks)
    for index, block in enumerate(blocks):
        block.conv1.register_forward_hook(lambda *args, i=index: calls.__setitem__(i, calls[i] + 1))
    trainer.fit()
    out.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach() for name, p in model.named_parameters()}  # BN buffers sync at the next forward
    torch.save({"weights": weights, "drops": calls}, out / f"rank{trainer.state.rank}.pt")


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run (cadence.distributed)
