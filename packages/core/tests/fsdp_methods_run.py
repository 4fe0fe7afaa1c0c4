"""Methods under FSDP, launched with ``torchrun --nproc_per_node 2 fsdp_methods_run.py OUT [CASE ...]``.

For each case the same run trains twice in the same two processes: with DDP (which equals one
process, see test_ddp.py) and sharded with FSDP. Rank 0 writes OUT/results.json: for each case the
largest weight difference between the two, or the error the sharded run raised; and the sharded
run's weights to OUT/<case>.pt. Run in one process (``python fsdp_methods_run.py OUT CASE``), it
trains each case unsharded only and writes its weights there.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from fsdp_run import GLOBAL_BATCH, VOCAB, lm_batch, tiny_gpt2
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import DataLoader, TensorDataset

from cadence import Classifier, HuggingFaceModel, Trainer
from cadence.distributed import exit_without_finalization, get_rank, get_world_size, initialize_from_environment
from cadence.testing import image_dataset, mlp_classifier, tiny_image_classifier


def _clip(kind: str) -> Callable[[], list[Any]]:
    def make() -> list[Any]:
        from cadence_gradient_clipping import GradientClipping

        return [GradientClipping(kind, 0.01 if kind == "adaptive" else 0.05)]

    return make


def _one(module: str, name: str, **kwargs: Any) -> Callable[[], list[Any]]:
    def make() -> list[Any]:
        import importlib

        return [getattr(importlib.import_module(module), name)(**kwargs)]

    return make


class ResidualBlock(nn.Module):
    """act(x + branch(x)): the residual contract stochastic depth drops blocks of."""

    def __init__(self, channels: int):
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        self.shortcut = None
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.branch(x))


def _stochastic_depth(mode: str) -> list[Any]:
    from cadence_stochastic_depth import StochasticDepth

    return [StochasticDepth(ResidualBlock, mode, drop_rate=0.5, drop_warmup="0ba")]


def _model(kind: str) -> Any:
    torch.manual_seed(0)
    if kind == "residual":
        layers = [nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), ResidualBlock(8), ResidualBlock(8)]
    elif kind == "groupnorm":
        layers = [nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.ReLU()]
    else:  # dropout
        layers = [nn.Flatten(), nn.Linear(3 * 16 * 16, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 8)]
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)] if kind != "dropout" else [nn.Linear(8, 4)]
    return Classifier(nn.Sequential(*layers, *head), num_classes=4)


def _none() -> list[Any]:
    return []


CASES: dict[str, tuple[str, Callable[[], list[Any]]]] = {
    "gradient_clipping_norm": ("mlp", _clip("norm")),
    "gradient_clipping_value": ("mlp", _clip("value")),
    "gradient_clipping_adaptive": ("mlp", _clip("adaptive")),
    "ema": ("mlp", _one("cadence_ema", "EMA", half_life=None, smoothing=0.8)),
    "swa": ("mlp", _one("cadence_swa", "SWA", swa_start="0.25dur", swa_end="0.9dur", update_interval="1ba")),
    "sam": ("mlp", _one("cadence_sam", "SAM", rho=0.05)),
    "label_smoothing": ("mlp", _one("cadence_label_smoothing", "LabelSmoothing", smoothing=0.1)),
    "mixup": ("mlp", _one("cadence_mixup", "MixUp", alpha=0.2)),
    "layer_freezing": ("mlp", _one("cadence_layer_freezing", "LayerFreezing", freeze_start=0.25, freeze_level=0.5)),
    "selective_backprop": ("mlp", _one("cadence_selective_backprop", "SelectiveBackprop", start=0.0, end=1.0)),
    "alibi": ("gpt2", _one("cadence_alibi", "Alibi", max_sequence_length=32, train_sequence_length_scaling=1.0)),
    "gated_linear_units": ("gpt2", _one("cadence_gated_linear_units", "GatedLinearUnits")),
    "low_precision_layernorm": ("gpt2", _one("cadence_low_precision_layernorm", "LowPrecisionLayerNorm")),
    "seq_length_warmup": (
        "gpt2",
        _one(
            "cadence_seq_length_warmup",
            "SeqLengthWarmup",
            duration=0.5,
            min_seq_length=4,
            max_seq_length=16,
            step_size=4,
        ),
    ),
    "blurpool": ("cnn", _one("cadence_blurpool", "BlurPool", min_channels=8)),
    "squeeze_excite": ("cnn", _one("cadence_squeeze_excite", "SqueezeExcite", latent_channels=0.5, min_channels=8)),
    "factorize": (
        "cnn",
        _one("cadence_factorize", "Factorize", min_channels=8, latent_channels=4, min_features=4, latent_features=1),
    ),
    "ghost_batchnorm": ("cnn", _one("cadence_ghost_batchnorm", "GhostBatchNorm", ghost_batch_size=2)),
    "weight_standardization": ("cnn", _one("cadence_weight_standardization", "WeightStandardization")),
    "progressive_resizing": ("cnn", _one("cadence_progressive_resizing", "ProgressiveResizing")),
    "cutmix": ("cnn", _one("cadence_cutmix", "CutMix", alpha=1.0)),
    "cutout": ("cnn", _one("cadence_cutout", "CutOut", num_holes=2, length=0.25)),
    "colout": ("cnn", _one("cadence_colout", "ColOut")),
    "scale_schedule": ("mlp", _one("cadence_scale_schedule", "ScaleSchedule", ratio=0.5)),
    "decoupled_weight_decay": ("mlp", _one("cadence_decoupled_weight_decay", "DecoupledWeightDecay", weight_decay=0.1)),
    "gyro_dropout": ("dropout", _one("cadence_gyro_dropout", "GyroDropout", p=0.5, sigma=4, tau=2)),
    "low_precision_groupnorm": ("groupnorm", _one("cadence_low_precision_groupnorm", "LowPrecisionGroupNorm")),
    "stochastic_depth_sample": ("residual", lambda: _stochastic_depth("sample")),
}
#: the sharding strategies, each against DDP: {case: (kind, fsdp config)}
STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "SHARD_GRAD_OP": ("mlp", {"sharding_strategy": "SHARD_GRAD_OP"}),
    "NO_SHARD": ("mlp", {"sharding_strategy": "NO_SHARD"}),
    "HYBRID_SHARD": ("mlp", {"sharding_strategy": "HYBRID_SHARD", "data_parallel_shard_degree": 1}),
    "activation_checkpointing": ("gpt2", {"activation_checkpointing": True}),
}


def _case(name: str) -> tuple[str, Callable[[], list[Any]], dict[str, Any]]:
    if name in STRATEGIES:
        kind, fsdp = STRATEGIES[name]
        return kind, _none, fsdp
    kind, make = CASES[name]
    return kind, make, {}


def train(kind: str, make_methods: Callable[[], list[Any]], fsdp: dict[str, Any] | None) -> dict[str, torch.Tensor]:
    world = get_world_size()
    data = torch.Generator().manual_seed(11)
    if kind == "gpt2":
        dataset = TensorDataset(torch.randint(0, VOCAB, (64, 16), generator=data))
        model: Any = HuggingFaceModel(tiny_gpt2())
        collate: Any = lm_batch
    elif kind == "cnn":
        dataset = image_dataset(64, 4, (3, 16, 16), seed=11)
        torch.manual_seed(0)
        model, collate = tiny_image_classifier(4), None
    elif kind in ("residual", "groupnorm", "dropout"):
        dataset = image_dataset(64, 4, (3, 16, 16), seed=11)
        model, collate = _model(kind), None
    else:
        dataset = TensorDataset(torch.randn(64, 8, generator=data), torch.randint(0, 4, (64,), generator=data))
        torch.manual_seed(0)
        model, collate = mlp_classifier(8, 4, hidden=16), None
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=GLOBAL_BATCH // world, shuffle=True, collate_fn=collate),
        max_duration="8ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=make_methods(),
        seed=5,
        device="cpu",
        progress_bar=False,
        parallelism_config=None if fsdp is None else {"fsdp": fsdp},
    )
    trainer.fit()
    weights = get_model_state_dict(trainer.state.model, options=StateDictOptions(full_state_dict=True))
    trainer.close()
    return {name: value.detach().clone() for name, value in weights.items() if isinstance(value, torch.Tensor)}


def main() -> None:
    out = Path(sys.argv[1])
    chosen = sys.argv[2:] or [*CASES, *STRATEGIES]
    initialize_from_environment(torch.device("cpu"))
    results: dict[str, Any] = {}
    for name in chosen:
        kind, make, fsdp = _case(name)
        reference = train(kind, make, fsdp=None)
        if get_world_size() == 1:
            out.mkdir(parents=True, exist_ok=True)
            torch.save(reference, out / f"{name}.pt")
            continue
        try:
            sharded = train(kind, make, fsdp=fsdp)
        except Exception as error:  # every rank raises the same: the runs stay in step
            results[name] = {
                "error": f"{type(error).__name__}: {error}"[:2000],
                "trace": traceback.format_exc()[-3000:],
            }
            continue
        if sharded.keys() != reference.keys():
            results[name] = {"error": f"other weights: {sorted(set(sharded) ^ set(reference))}"}
            continue
        gap = max((sharded[k].double() - reference[k].double()).abs().max().item() for k in reference)
        results[name] = {"max_abs_diff": gap}
        if get_rank() == 0:
            out.mkdir(parents=True, exist_ok=True)
            torch.save(sharded, out / f"{name}.pt")
    if get_rank() == 0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
    exit_without_finalization()  # finalisation can abort a finished gloo run
