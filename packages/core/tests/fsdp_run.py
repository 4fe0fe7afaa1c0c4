"""A run used by test_fsdp*.py, launched plainly (one process) or with torchrun.

    python fsdp_run.py OUT [--fsdp '{}'] [--model mlp|gpt2] [--methods alibi,glu,clip,ema] [--duration 6ba]
                           [--save FOLDER] [--autoresume] [--kill-at BATCH]

The global batch is fixed (16 samples), so every world size trains on the same batches. Every rank
writes OUT/rank{r}.pt: the whole model's weights (gathered from the shards), the losses rank 0
logged, evaluation results, its world size and the batches trained.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import DataLoader, TensorDataset

from cadence import Callback, Event, HuggingFaceModel, InMemoryLogger, Trainer
from cadence.distributed import exit_without_finalization, get_world_size, initialize_from_environment
from cadence.testing import mlp_classifier

GLOBAL_BATCH = 16
VOCAB, LENGTH = 64, 16


def lm_batch(samples: list[tuple[torch.Tensor]]) -> dict[str, torch.Tensor]:
    ids = torch.stack([sample[0] for sample in samples])
    return {"input_ids": ids, "labels": ids.clone()}


def tiny_gpt2() -> torch.nn.Module:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,  # dropout draws differ per rank
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def build(kind: str) -> tuple[torch.nn.Module, TensorDataset, Any]:
    data = torch.Generator().manual_seed(11)
    if kind == "gpt2":
        dataset = TensorDataset(torch.randint(0, VOCAB, (64, LENGTH), generator=data))
        return HuggingFaceModel(tiny_gpt2()), dataset, lm_batch
    dataset = TensorDataset(torch.randn(64, 8, generator=data), torch.randint(0, 4, (64,), generator=data))
    torch.manual_seed(0)
    return mlp_classifier(8, 4, hidden=16), dataset, None


def evaluation(samples: int) -> TensorDataset:
    data = torch.Generator().manual_seed(12)
    return TensorDataset(torch.randn(samples, 8, generator=data), torch.randint(0, 4, (samples,), generator=data))


def methods(names: list[str]) -> list[Any]:
    made = []
    for name in names:
        if name == "alibi":
            from cadence_alibi import Alibi

            made.append(Alibi(max_sequence_length=32, train_sequence_length_scaling=1.0))
        elif name == "glu":
            from cadence_gated_linear_units import GatedLinearUnits

            made.append(GatedLinearUnits())
        elif name == "clip":
            from cadence_gradient_clipping import GradientClipping

            made.append(GradientClipping("norm", 0.5))
        elif name == "ema":
            from cadence_ema import EMA

            made.append(EMA(half_life=None, smoothing=0.9))
        else:
            raise ValueError(f"unknown method {name}")
    return made


class KillAt(Callback):
    """SIGKILLs every rank right after the checkpoint at batch `batch` is written (as a crash would)."""

    def __init__(self, batch: int):
        self.batch = batch

    def run_event(self, event: Event, state: Any, logger: Any) -> None:
        if event is Event.BATCH_CHECKPOINT and int(state.timestamp.batch) == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--fsdp", default=None, help="the fsdp dict as JSON; leave out for no sharding")
    parser.add_argument("--model", default="mlp", choices=["mlp", "gpt2"])
    parser.add_argument("--methods", default="")
    parser.add_argument("--duration", default="6ba")
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument("--autoresume", action="store_true")
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    parser.add_argument("--eval", type=int, default=0, help="evaluate on this many samples (mlp), 100 a batch")
    parser.add_argument("--later", type=int, default=0, help="then try eval() and predict() on this many samples")
    args = parser.parse_args()
    initialize_from_environment(torch.device("cpu"))
    world = get_world_size()
    model, dataset, collate = build(args.model)
    if args.optimizer == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    logger = InMemoryLogger()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=GLOBAL_BATCH // world, shuffle=True, collate_fn=collate),
        max_duration=args.duration,
        optimizers=optimizer,
        algorithms=methods([name for name in args.methods.split(",") if name]),
        callbacks=[KillAt(args.kill_at)] if args.kill_at is not None else [],
        loggers=[logger],
        save_folder=args.save,
        save_interval="2ba",
        autoresume=args.autoresume,
        seed=5,
        device="cpu",
        progress_bar=False,
        parallelism_config=None if args.fsdp is None else {"fsdp": json.loads(args.fsdp)},
        eval_dataloader=DataLoader(evaluation(args.eval), batch_size=100) if args.eval else None,
        eval_interval=0,
    )
    trainer.fit()
    metrics = trainer.eval() if args.eval else {}
    refused = []
    for name, call in (("eval", trainer.eval), ("predict", trainer.predict)):
        try:
            call(DataLoader(evaluation(args.later), batch_size=100)) if args.later else None
        except ValueError as error:  # every rank refuses: none waits in a forward for the others
            refused.append(f"{name}: {error}")
    weights = get_model_state_dict(trainer.state.model, options=StateDictOptions(full_state_dict=True))
    losses = {int(time.batch): float(value) for time, value in logger.data.get("loss/train/total", [])}
    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "model": {name: tensor.detach().clone() for name, tensor in weights.items()},
            "losses": losses,
            "metrics": metrics,
            "refused": refused,  # rank 0's own microbatch losses
            "world": world,
            "batches": int(trainer.state.timestamp.batch),
            "sharded": type(trainer.state.model).__name__.startswith("FSDP"),
        },
        args.out / f"rank{trainer.state.rank}.pt",
    )
    trainer.close()


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run
