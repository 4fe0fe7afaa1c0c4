"""One run on several processes: ``nproc`` (``--nproc N``) launches it through ``torchrun`` (gloo on CPU, NCCL on GPUs)
and ``fsdp`` (``--fsdp``) shards the model with FSDP2 instead of replicating it with DDP.

A recipe's ``batch_size`` is the *global* batch: each of the N processes trains on its own 1/N of every
batch (`cadence_harness.running.loaders.TensorLoader` slices the same global order on every rank; a
``DataLoader`` gets ``batch_size / N`` and the Trainer's sampler shards it), and DDP averages the
gradients, so N processes compute what one process computes with the whole batch (up to floating point,
and except what depends on the per-process batch: BatchNorm's statistics, per-batch randomness).
``eval_batch_size`` is global too; evaluation splits every sample once across the ranks and the
metrics are gathered from all of them. ``device_train_microbatch_size`` is per process.

Only rank 0 creates and logs the MLflow run; its params say ``world_size`` and ``sharding`` (``none``,
``ddp`` or ``fsdp:<strategy>``). ``nproc`` and ``fsdp`` are part of a run's identity when set (a 2-process
run is another configuration than a 1-process one: other timings, other BatchNorm statistics), and left
out of it at their defaults, so the identities of 1-process runs are unchanged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import torch

from cadence.distributed import check_parallelism_config
from cadence_harness.running.recipe_checks import RecipeError, check_int, fail, resolved_precision

__all__ = [
    "FSDP_STRATEGIES",
    "check_scale_out",
    "check_shares",
    "check_world",
    "launcher",
    "parallelism_config",
    "require_processes",
    "sharding",
]

FSDP_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
DEFAULTS: dict[str, Any] = {"nproc": 1, "fsdp": None}  # left out of a run's identity when at these values


def check_scale_out(values: dict[str, Any]) -> None:
    """Check ``nproc`` and ``fsdp`` of a recipe's values (before anything runs); fills in ``fsdp``'s strategy."""
    nproc = values.get("nproc", 1)
    check_int("nproc", nproc)
    batch_size = values.get("batch_size", 128)
    if isinstance(batch_size, int) and batch_size % nproc:
        raise fail(
            "batch_size",
            batch_size,
            f"is the global batch, split evenly across nproc = {nproc} processes; use a multiple of {nproc} "
            f"(e.g. {batch_size - batch_size % nproc or nproc}) or another --nproc",
        )
    microbatch = values.get("device_train_microbatch_size")
    if isinstance(microbatch, int) and isinstance(batch_size, int) and microbatch > batch_size // nproc:
        raise fail(
            "device_train_microbatch_size",
            microbatch,
            f"is per process, and each of the {nproc} processes trains on {batch_size // nproc} samples of a batch; "
            f"use at most {batch_size // nproc}",
        )
    fsdp = values.get("fsdp")
    if fsdp is None:
        return
    if not isinstance(fsdp, Mapping):
        raise fail("fsdp", fsdp, "must be a table of FSDP options ({} for the defaults), e.g. [fsdp] or --fsdp")
    strategy = fsdp.get("sharding_strategy", "FULL_SHARD")
    if strategy not in FSDP_STRATEGIES:
        raise fail("fsdp.sharding_strategy", strategy, f"must be one of {', '.join(map(repr, FSDP_STRATEGIES))}")
    values["fsdp"] = {**fsdp, "sharding_strategy": strategy}  # one spelling per configuration: one identity
    device = values.get("device")
    precision = resolved_precision(values.get("precision"), device)
    try:  # every other key, as each worker's Trainer would check it, before N processes start to refuse it
        check_parallelism_config(parallelism_config(values["fsdp"]), precision, "cuda" if device == "gpu" else "cpu")
    except (TypeError, ValueError) as error:
        raise fail("fsdp", dict(fsdp), str(error)) from None


def check_shares(nproc: int, train: Any, evaluate: Any, subset: int | None, eval_subset: int | None) -> None:
    """Refuse, before torchrun starts, data too small to share among `nproc` processes, asked of the loaders one
    process built (`train`, `evaluate`) for the grid's method checks: each rank's loader would refuse it, and the
    run would end as N tracebacks. Only the loaders know their sample counts (a dataset smaller than ``subset``,
    a causal LM's blocks), so this waits for the data; a ``DataLoader`` is sharded by the Trainer's sampler."""
    from cadence_harness.running.loaders import TensorLoader

    if nproc > 1 and isinstance(train, TensorLoader) and not train.shares_for(nproc):
        count, batch = train.num_samples, train.batch_size
        fixes = [f"--subset {batch} or more" if subset is not None else "more training samples"]
        fixes += [f"--batch-size {count - count % nproc} or less"] if count >= nproc else []
        raise RecipeError(
            f"`nproc` = {nproc}: {count} training samples{f' (subset = {subset})' if subset is not None else ''} "
            f"make no full batch of {batch}, and each of the {nproc} processes must train on its share of every "
            f"batch; use {', '.join(fixes)}, or --nproc 1"
        )
    if nproc > 1 and isinstance(evaluate, TensorLoader) and not evaluate.shares_for(nproc):
        given = f" (eval_subset = {eval_subset})" if eval_subset is not None else ""
        raise RecipeError(
            f"`nproc` = {nproc}: {evaluate.num_samples} evaluation samples{given} cannot give each of the {nproc} "
            f"processes one to evaluate; use --eval-subset {nproc} or more, or --nproc {evaluate.num_samples}"
        )


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without ``nproc`` and ``fsdp`` where they are at their defaults (one process, DDP or none)."""
    return {k: v for k, v in config.items() if not (k in DEFAULTS and v == DEFAULTS[k])}


def sharding(fsdp: Mapping[str, Any] | None, world_size: int) -> str:
    """How the model is spread: ``none`` (one process), ``ddp`` (replicated), ``fsdp:<strategy>``."""
    if fsdp is not None:
        return f"fsdp:{fsdp.get('sharding_strategy', 'FULL_SHARD')}"
    return "ddp" if world_size > 1 else "none"


def parallelism_config(fsdp: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Trainer's ``parallelism_config`` for a recipe's ``fsdp`` table (None: DDP)."""
    return None if fsdp is None else {"fsdp": dict(fsdp)}


def require_processes(nproc: int, device: str) -> None:
    """Refuse, before anything runs, ``nproc`` processes this machine cannot give: one GPU each on ``gpu``."""
    if device == "gpu" and nproc > torch.cuda.device_count():
        raise RecipeError(
            f"`nproc` = {nproc}: each process trains on a GPU of its own and this machine has "
            f"{torch.cuda.device_count()}; use --nproc {max(torch.cuda.device_count(), 1)} or fewer"
        )


def check_world(nproc: int) -> None:
    """A run of ``nproc`` processes runs under a torchrun of that many (``WORLD_SIZE``); cadence-bench starts it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != nproc:
        raise RecipeError(
            f"`nproc` = {nproc}, but this process is one of {world} (WORLD_SIZE): run it through "
            f"`cadence-bench run/grid ... --nproc {world}`, which launches torchrun itself"
        )


def launcher(nproc: int) -> list[str]:
    """The command that starts ``python -m cadence_harness ...`` as `nproc` processes (one, without torchrun)."""
    if nproc == 1:
        return [sys.executable, "-m", "cadence_harness"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return [*torchrun, "-m", "cadence_harness"]
