"""Composer's ``parallelism_config={"fsdp": {...}}``, checked before anything runs (`parse_parallelism_config`).

Every key is mapped onto torch's FSDP2 terms (`FSDPSettings`, which `cadence._sharding` applies) or
refused by name, saying why: Composer's FSDP1 knobs that FSDP2 has no use for are accepted only with
the value that describes FSDP2's own behaviour.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cadence.precision import Precision

__all__ = ["FSDPSettings", "parse_parallelism_config"]

_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}
# Composer keys FSDP2 has no use for: accepted with the value that describes FSDP2's own behaviour,
# refused with any other (key: (accepted value, why another cannot be honoured)).
_FIXED = {
    "use_orig_params": (True, "FSDP2 always trains the original parameters (DTensors); it has no flat parameters"),
    "limit_all_gathers": (True, "FSDP2 always limits the all-gathers in flight"),
    "backward_prefetch": ("BACKWARD_PRE", "FSDP2 prefetches the next block's all-gather in backward by itself"),
    "backward_prefetch_limit": (1, "FSDP2 prefetches one block ahead"),
    "forward_prefetch": (False, "FSDP2 prefetches in forward only on request; cadence does not expose that yet"),
    "forward_prefetch_limit": (1, "FSDP2 prefetches one block ahead"),
    "activation_checkpointing_reentrant": (False, "FSDP2 composes with non-reentrant activation checkpointing only"),
    "activation_cpu_offload": (False, "offloading activations to the host is not implemented"),
    "keep_low_precision_grads": (False, "gradients are reduced and kept in mixed_precision's reduce dtype"),
    "load_monolith_rank0_only": (False, "every rank reads the shards it needs from a sharded checkpoint"),
    "state_dict_type": (
        "sharded",
        "checkpoints are written sharded through torch.distributed.checkpoint; one "
        "loads into any number of processes, one included",
    ),
    "te_checkpoint_wrapper": (False, "TransformerEngine is not supported"),
    "te_shard_fp8_weight": (False, "TransformerEngine is not supported"),
    "load_planner": (None, "checkpoints load with cadence's planner, which refuses pickled objects"),
    "save_planner": (None, "checkpoints are written with torch's default planner"),
    "ignored_modules": (None, "every parameter is sharded; freeze a module instead of ignoring it"),
    "process_group": (None, "the mesh is built from torchrun's world and data_parallel_shard_degree"),
    "device_mesh": (None, "the mesh is built from torchrun's world and data_parallel_shard_degree"),
    "sharded_ckpt_prefix_dir": (None, "a sharded checkpoint is a folder named by save_filename"),
}
_OWN = (
    "sharding_strategy",
    "reshard_after_forward",
    "mixed_precision",
    "activation_checkpointing",
    "cpu_offload",
    "auto_wrap",
    "sync_module_states",
    "verbose",
    "data_parallel_shard_degree",
    "data_parallel_replicate_degree",
)


@dataclass(frozen=True)
class FSDPSettings:
    """What `parse_parallelism_config` accepted, in ``fully_shard``'s terms."""

    reshard_after_forward: bool | int = True
    shard_degree: int | None = None  # ranks per shard group; None: all of them (no replication)
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    auto_wrap: bool = True
    sync_module_states: bool = True
    verbose: bool = False
    config: dict[str, Any] = field(default_factory=dict, compare=False)  # as given, for the logs


def parse_parallelism_config(value: Any, precision: Precision, device: torch.device) -> FSDPSettings | None:
    """Composer's ``parallelism_config``: None, or ``{"fsdp": {...}}``; every key checked before training."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f'parallelism_config={value!r}: pass a dict such as {{"fsdp": {{}}}} (FSDP2 defaults)')
    for key in value:
        if key == "tp":
            raise ValueError('parallelism_config["tp"]: tensor parallelism is not supported; shard with "fsdp"')
        if key != "fsdp":
            raise ValueError(f"parallelism_config has key {key!r}; the one key cadence takes is 'fsdp'")
    fsdp = value.get("fsdp")
    if fsdp is None:
        return None
    if not isinstance(fsdp, Mapping):
        raise TypeError(f'parallelism_config["fsdp"]={fsdp!r}: pass a dict of FSDP options ({{}}: the defaults)')
    return _settings(dict(fsdp), precision, device)


def _refuse_unknown(config: dict[str, Any]) -> None:
    for key, given in config.items():
        if key in _FIXED:
            accepted, why = _FIXED[key]
            if given != accepted:
                raise ValueError(f"fsdp {key}={given!r} cannot be honoured: {why}; leave it out (or pass {accepted!r})")
        elif key not in _OWN:
            close = difflib.get_close_matches(key, [*_OWN, *_FIXED], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; cadence's FSDP takes {', '.join(_OWN)}"
            raise ValueError(f"parallelism_config['fsdp'] has unknown key {key!r}{hint}")


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise TypeError(f"fsdp {key}={value!r} must be True or False")
    return value


def _degree(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"fsdp {key}={value!r} must be a positive int, or -1 / None for automatic")
    return value


def _settings(config: dict[str, Any], precision: Precision, device: torch.device) -> FSDPSettings:
    _refuse_unknown(config)
    strategy = str(config.get("sharding_strategy", "FULL_SHARD")).upper()
    if strategy not in _STRATEGIES:
        raise ValueError(f"fsdp sharding_strategy={config['sharding_strategy']!r}; choose one of {_STRATEGIES}")
    reshard: bool | int = strategy in ("FULL_SHARD", "HYBRID_SHARD")
    if "reshard_after_forward" in config:  # FSDP2's own key, more precise than the strategy
        reshard = config["reshard_after_forward"]
        if not isinstance(reshard, (bool, int)) or (not isinstance(reshard, bool) and reshard < 1):
            raise ValueError(f"fsdp reshard_after_forward={reshard!r}: True, False, or a group size >= 1 ranks")
    shard_degree = _degree(config, "data_parallel_shard_degree")
    replicate_degree = _degree(config, "data_parallel_replicate_degree")
    if strategy == "NO_SHARD":
        shard_degree = 1
    elif strategy.endswith("HYBRID_SHARD") or strategy == "_HYBRID_SHARD_ZERO2":
        shard_degree = shard_degree or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if replicate_degree is not None and shard_degree is None:
        raise ValueError("fsdp data_parallel_replicate_degree needs data_parallel_shard_degree (or HYBRID_SHARD)")
    cpu_offload = _flag(config, "cpu_offload", False)
    if cpu_offload and device.type != "cuda":
        raise ValueError(
            f"fsdp cpu_offload=True keeps the shards in host memory and moves them to the GPU for compute; this "
            f"run is on {device.type}, where the weights are in host memory already. Leave it out"
        )
    param, reduce, output = _mixed_precision(config.get("mixed_precision", "DEFAULT"), precision)
    return FSDPSettings(
        reshard_after_forward=reshard,
        shard_degree=shard_degree,
        param_dtype=param,
        reduce_dtype=reduce,
        output_dtype=output,
        activation_checkpointing=_flag(config, "activation_checkpointing", False),
        cpu_offload=cpu_offload,
        auto_wrap=_flag(config, "auto_wrap", True),
        sync_module_states=_flag(config, "sync_module_states", True),
        verbose=_flag(config, "verbose", False),
        config=config,
    )


def _mixed_precision(value: Any, precision: Precision) -> tuple[torch.dtype | None, ...]:
    """(param, reduce, output) dtypes: Composer's 'DEFAULT' (compute in the run's precision, reduce in
    fp32), 'PURE' (reduce in it too), 'FULL' (fp32 throughout), or a dict of dtypes."""
    low = precision.autocast_dtype
    if isinstance(value, str) and value.upper() in ("DEFAULT", "PURE", "FULL"):
        mode = value.upper()
        if mode == "FULL" or low is None:
            return None, None, None
        return low, (low if mode == "PURE" else torch.float32), None
    if not isinstance(value, Mapping):
        raise ValueError(f"fsdp mixed_precision={value!r}: 'DEFAULT', 'PURE', 'FULL' or a dict of dtypes")
    unknown = set(value) - {"param_dtype", "reduce_dtype", "output_dtype", "buffer_dtype"}
    if unknown:
        raise ValueError(
            f"fsdp mixed_precision has unknown keys {sorted(unknown)}; it takes param_dtype, reduce_dtype, output_dtype"
        )
    if value.get("buffer_dtype") is not None:
        raise ValueError("fsdp mixed_precision buffer_dtype cannot be honoured: FSDP2 leaves buffers in their dtype")
    return tuple(_dtype(value, key) for key in ("param_dtype", "reduce_dtype", "output_dtype"))


def _dtype(value: Mapping[str, Any], key: str) -> torch.dtype | None:
    given = value.get(key)
    if given is None or isinstance(given, torch.dtype):
        return given
    if str(given).lower() not in _DTYPES:
        raise ValueError(f"fsdp mixed_precision {key}={given!r}; choose one of {sorted(_DTYPES)} or a torch.dtype")
    return _DTYPES[str(given).lower()]
