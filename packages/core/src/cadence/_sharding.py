"""FSDP2 for the Trainer: Composer's ``parallelism_config={"fsdp": {...}}`` mapped onto torch's ``fully_shard``.

cadence has no sharding engine. `parse_parallelism_config` checks the configuration before anything
runs (every key it cannot honour is refused by name, saying why); `shard_model` then applies torch's
FSDP2 (``torch.distributed.fsdp.fully_shard``, DTensor parameters) after surgery (INIT) and before a
checkpoint loads, so surgery always sees the whole model and the checkpoint loads into the shards:

* the blocks to wrap: the model's ``fsdp_wrap_fn(module) -> bool`` (Composer's hook), else modules
  marked ``module._fsdp_wrap = True``, else the transformer blocks a HuggingFace model names in
  ``_no_split_modules`` and the residual blocks of torchvision and timm models; the root always;
* Composer's ``sharding_strategy``: FULL_SHARD (``reshard_after_forward=True``), SHARD_GRAD_OP
  (False), NO_SHARD (a ``(world, 1)`` mesh: every rank holds every weight, gradients are
  all-reduced), HYBRID_SHARD (shards within groups of ``data_parallel_shard_degree`` ranks,
  default the ranks of one node, replicated across groups);
* ``mixed_precision`` ('DEFAULT', 'PURE', 'FULL' or a dict of dtypes) → ``MixedPrecisionPolicy``;
  ``activation_checkpointing`` → torch's composable ``checkpoint`` on each block; ``cpu_offload``
  → ``CPUOffloadPolicy`` (CUDA only).

Rank 0's weights are broadcast first (``sync_module_states``, as DDP does), and the optimizers
built on ``model.parameters()`` are pointed at the sharded parameters (they must not have stepped).
As under DDP, rank 0's buffers are broadcast before each training forward (FSDP shards parameters
only). Refused before training, with the reason: surgery after INIT, non-contiguous (channels_last)
weights, methods that skip blocks per rank, and evaluation sets the ranks split into unequal batch
counts (each would hang or fail inside a collective). Two shims for torch 2.14's DTensor let methods
that treat weights in foreach calls (EMA, SAM) work on the shards (`enable_dtensor_foreach_copy`,
`treat_plain_tensors_as_replicated`).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn

from cadence._fsdp_config import FSDPSettings, parse_parallelism_config

__all__ = [
    "FSDPSettings",
    "check_even_batches",
    "is_sharded",
    "parse_parallelism_config",
    "shard_model",
    "wrap_targets",
]

RESIDUAL_BLOCKS = frozenset({"BasicBlock", "Bottleneck", "InvertedResidual", "ResBottleneckBlock", "Block"})
"""Class names wrapped by default besides HuggingFace's ``_no_split_modules``: torchvision's and timm's
ResNet blocks, MobileNet/EfficientNet blocks, RegNet blocks and timm's ViT ``Block``."""


# Sharding --------------------------------------------------------------------------------------
def is_sharded(model: nn.Module) -> bool:
    """Whether `model` was sharded by `shard_model` (its parameters are DTensors)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def wrap_targets(model: nn.Module) -> list[nn.Module]:
    """The blocks `shard_model` shards on their own (each all-gathers its weights only while it runs)."""
    holder = next((m for m in model.modules() if callable(getattr(m, "fsdp_wrap_fn", None))), None)
    chooser = getattr(holder, "fsdp_wrap_fn", None)  # on the model, or on the module a wrapper holds
    if chooser is not None:
        return [module for module in model.modules() if module is not model and chooser(module)]
    marked = [module for module in model.modules() if getattr(module, "_fsdp_wrap", False) and module is not model]
    if marked:
        return marked
    names = set(RESIDUAL_BLOCKS)
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return [module for module in model.modules() if module is not model and type(module).__name__ in names]


def _join_single_process_group(device: torch.device) -> None:
    """FSDP needs a process group; outside torchrun, a group of this process alone (NCCL on a GPU)."""
    if not torch_dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        torch_dist.init_process_group(backend, store=torch_dist.HashStore(), rank=0, world_size=1)


def _mesh(settings: FSDPSettings, device: torch.device) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    world = torch_dist.get_world_size()
    if settings.shard_degree is None or settings.shard_degree == world:
        return init_device_mesh(device.type, (world,))
    if world % settings.shard_degree:
        raise ValueError(f"fsdp data_parallel_shard_degree={settings.shard_degree} does not divide the {world} ranks")
    return init_device_mesh(
        device.type, (world // settings.shard_degree, settings.shard_degree), mesh_dim_names=("replicate", "shard")
    )


def _check_fresh(optimizers: list[torch.optim.Optimizer]) -> None:
    for index, optimizer in enumerate(optimizers):
        if len(optimizer.state):
            raise ValueError(
                f"optimizer {index} ({type(optimizer).__name__}) has stepped already; under FSDP the trainer points "
                "it at the sharded parameters, which needs an optimizer that has no state yet: build a fresh one"
            )


def _rebind_optimizers(optimizers: list[torch.optim.Optimizer], names: dict[int, str], model: nn.Module) -> None:
    """Point every optimizer (and a wrapper's base optimizer) at the sharded parameters, by name."""
    sharded = dict(model.named_parameters(remove_duplicate=False))
    done: set[int] = set()  # a wrapper (SAM) shares its base optimizer's groups
    for optimizer in itertools.chain(optimizers, (getattr(o, "base_optimizer", None) for o in optimizers)):
        if optimizer is None:
            continue
        for group in optimizer.param_groups:
            if id(group) in done:
                continue
            done.add(id(group))
            missing = [p for p in group["params"] if id(p) not in names]
            if missing:
                raise ValueError(
                    f"{type(optimizer).__name__} optimizes {len(missing)} tensor(s) that are not parameters of the "
                    "model; under FSDP every optimized parameter must belong to the model"
                )
            group["params"] = [sharded[names[id(p)]] for p in group["params"]]


def _buffers_follow_rank0(module: nn.Module, args: Any) -> None:
    """Before each training forward, rank 0's buffers on every rank, as DDP does (``broadcast_buffers``): FSDP
    shards parameters only, and per-rank buffers (BatchNorm statistics, Gyro Dropout's masks) would drift."""
    if module.training:
        with torch.no_grad():
            for buffer in module.buffers():
                torch_dist.broadcast(buffer, src=0)


def _broadcast_from_rank0(model: nn.Module) -> None:
    if torch_dist.get_world_size() > 1:
        with torch.no_grad():
            for tensor in itertools.chain(model.parameters(), model.buffers()):
                torch_dist.broadcast(tensor.data, src=0)


def shard_model(state: Any, settings: FSDPSettings | None, data: Any = None) -> nn.Module:
    """``state.model``, sharded in place with ``fully_shard`` as `settings` say (nothing happens for None),
    its optimizers pointed at the shards. Runs after INIT: surgery has changed the model already.
    `data` (the trainer's `RunData`): its evaluation loader must give every rank as many batches."""
    model, optimizers, device = state.model, state.optimizers, state.device
    if settings is None:
        return model
    refuse_late_surgery(state.algorithms)
    refuse_skipped_blocks(state.algorithms)
    refuse_non_contiguous(model)
    from torch.distributed._composable import checkpoint
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    _join_single_process_group(device)
    refuse_uneven_evaluation(getattr(data, "eval", None), getattr(data, "eval_subset", -1))
    enable_dtensor_foreach_copy()
    treat_plain_tensors_as_replicated()
    _check_fresh(optimizers)
    mesh = _mesh(settings, device)
    if settings.sync_module_states:
        _broadcast_from_rank0(model)
    names = {id(p): name for name, p in model.named_parameters()}  # a tied weight by its first name
    policy = MixedPrecisionPolicy(settings.param_dtype, settings.reduce_dtype, settings.output_dtype)
    options: dict[str, Any] = {"mesh": mesh, "mp_policy": policy}
    options["reshard_after_forward"] = settings.reshard_after_forward
    if settings.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    blocks = wrap_targets(model)
    for block in reversed(blocks):  # innermost first
        if settings.activation_checkpointing:
            checkpoint(block)
        if settings.auto_wrap:
            fully_shard(block, **options)
    fully_shard(model, **options)
    register_fsdp_forward_method(model, "eval_forward")  # evaluation calls it, not forward
    if torch_dist.get_world_size() > 1 and any(True for _ in model.buffers()):
        model.register_forward_pre_hook(_buffers_follow_rank0)
    _rebind_optimizers(optimizers, names, model)
    if settings.verbose and torch_dist.get_rank() == 0:
        kinds = sorted({type(block).__name__ for block in blocks})
        print(
            f"cadence FSDP: {len(blocks) if settings.auto_wrap else 0} blocks sharded ({', '.join(kinds)}) + root, "
            f"mesh {tuple(mesh.shape)}, reshard_after_forward={settings.reshard_after_forward}"
        )
    return model


def refuse_late_surgery(algorithms: list[Any]) -> None:
    """Surgery must run on INIT under FSDP: later, it would replace modules inside sharded blocks, whose
    new parameters FSDP would never gather."""
    for algorithm in algorithms:
        apply_at = getattr(algorithm, "apply_at", "init")
        apply_at = getattr(apply_at, "value", apply_at)  # an Event or its name
        if algorithm.required_on_load() and apply_at != "init":
            raise ValueError(
                f"{type(algorithm).__name__}(apply_at={apply_at!r}) changes the model after it is sharded, and FSDP "
                f"would never gather the new modules' parameters; pass apply_at='init' (surgery before sharding)"
            )


def check_even_batches(model: nn.Module, plan: Any, subset: int | None, default_subset: int = -1) -> None:
    """`refuse_uneven_evaluation` for a sharded `model` (the trainer asks before every evaluation and prediction:
    a loader passed to ``fit``, ``eval`` or ``predict`` is checked too); nothing for others. A `subset` of None
    or -1 means `default_subset` (the trainer's ``eval_subset_num_batches``)."""
    if is_sharded(model):
        refuse_uneven_evaluation(plan, default_subset if subset in (None, -1) else subset)


def refuse_uneven_evaluation(plan: Any, subset: int | None) -> None:
    """Under FSDP every forward gathers weights from all ranks, so every rank must evaluate as many batches;
    cadence's exact evaluation splits a set of 1,001 samples 501/500, which can leave one rank a batch short."""
    if plan is None or not getattr(plan, "has_length", False) or torch_dist.get_world_size() == 1:
        return
    mine = len(plan) if not subset or subset < 0 else min(len(plan), subset)
    counts = [0] * torch_dist.get_world_size()
    torch_dist.all_gather_object(counts, mine)
    if len(set(counts)) > 1:
        raise ValueError(
            f"under FSDP every rank must evaluate the same number of batches (each forward gathers the weights from "
            f"all ranks), and the loader gives the ranks {counts} batches; pass eval_subset_num_batches="
            f"{min(counts)} (subset_num_batches= to eval() and predict()), or a set the ranks split evenly"
        )


def refuse_skipped_blocks(algorithms: list[Any]) -> None:
    """A method that skips whole blocks on some ranks and not others: under DDP the skipped parameters just get
    no gradient (``find_unused_parameters``); under FSDP the ranks that run the block wait forever in its
    all-gather for those that skipped it. By class name and mode, since no declaration says so (yet)."""
    for algorithm in algorithms:
        if type(algorithm).__name__ == "StochasticDepth" and getattr(algorithm, "stochastic_method", "") == "block":
            raise ValueError(
                "StochasticDepth(stochastic_method='block') drops whole blocks, each rank its own, and under FSDP a "
                "block run on one rank and skipped on another hangs both (its forward gathers weights from every "
                "rank); use stochastic_method='sample' (tested sharded), or train with DDP"
            )


def refuse_non_contiguous(model: nn.Module) -> None:
    """FSDP2 shards contiguous parameters only ("FSDP does not support non-contiguous parameters yet")."""
    for name, parameter in model.named_parameters():
        if not parameter.is_contiguous():
            raise ValueError(
                f"parameter {name} is not contiguous (stride {parameter.stride()}), as ChannelsLast's channels_last "
                "convolution weights are; FSDP2 shards contiguous parameters only: leave that method out under "
                "parallelism_config, or train with DDP"
            )


def enable_dtensor_foreach_copy() -> None:
    """Give DTensor (torch <= 2.14) the pointwise rule of ``torch._foreach_copy_`` that its other foreach ops
    have: EMA's weight swap and SAM's restore copy lists of sharded tensors with it. Idempotent."""
    from torch.distributed.tensor import DTensor

    op = torch.ops.aten._foreach_copy_.default
    propagator = DTensor._op_dispatcher.sharding_propagator
    registered = {
        **getattr(propagator, "op_strategy_funcs", {}),
        **getattr(propagator, "op_single_dim_strategy_funcs", {}),
    }
    if op in registered:
        return
    try:
        from torch.distributed.tensor._ops._pointwise_ops import _register_single_dim_pointwise
    except ImportError:  # a later torch has it, or registers it differently
        return
    _register_single_dim_pointwise(op)


def treat_plain_tensors_as_replicated() -> None:
    """Let an op that meets sharded parameters and plain tensors treat the plain ones as replicated
    (torch's ``implicit_replication``, for the rest of the process).

    That is what they are under FSDP2: it shards parameters and leaves buffers (BatchNorm statistics,
    attention masks, ALiBi slopes) whole and equal on every rank. Methods that treat all of a model's
    tensors in one foreach call (EMA's average of parameters and buffers) rely on it.
    """
    from torch.distributed.tensor import DTensor

    DTensor._op_dispatcher._allow_implicit_replication = True
