"""One run, in this process: build data, model and methods from a `RunSpec`, train, log to MLflow.

Every run logs, through the core's batched `MLFlowLogger`: params (model, data, each method
with all its hyperparameters and its declared effects, seed, batch size, precision, device, versions, git sha), the
per-step loss and per-evaluation metrics, ``time/*`` and ``final/*`` timings, process CPU time
and training FLOPs (`cadence_harness.running.flops`), throughput and peak memory, and the resolved
configuration as an artifact. A cyclic run (``schedule.cycles``) also evaluates at every cycle's
end. A failure marks the run FAILED (KILLED on Ctrl-C or SIGTERM) with the error in the
``cadence.error`` tag, then propagates; the Trainer records that, as it records FINISHED when it
is closed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch

import cadence
from cadence import Algorithm, distributed
from cadence.engine import DeclaredMethod
from cadence.termination import RunTerminated
from cadence_harness.records import effects_param
from cadence_harness.running import data as datasets
from cadence_harness.running import loaders, resident, text_loaders
from cadence_harness.running.budgets import CycleEnds, build_schedulers, cycles_of
from cadence_harness.running.flops import FlopCounter
from cadence_harness.running.method_table import base_method
from cadence_harness.running.models import build_image_model, build_text_model
from cadence_harness.running.optimizer import build_optimizer, optimizer_procedures
from cadence_harness.running.preflight import check_applicable, check_arm_composition, require_device, sample_batch
from cadence_harness.running.provenance import environment, git_sha
from cadence_harness.running.recipe import Recipe, build_algorithm
from cadence_harness.running.runspec import RunSpec
from cadence_harness.running.scale_out import check_world, parallelism_config, sharding
from cadence_harness.running.text_tokenizers import DEFAULT_VOCAB_SIZE, build_tokenizer, tokenizer_sha256
from cadence_harness.running.timing import RunTimer, data_bound_warning

__all__ = [
    "RunLoaders",
    "RunResult",
    "build_algorithms",
    "build_data",
    "build_model",
    "environment",
    "execute",
    "git_sha",
    "params_of",
]

ACCURACY = "MulticlassAccuracy"
QUALITY = {"detection": "MeanAveragePrecision"}  # the eval metric read as accuracy, by data kind (else ACCURACY)


@dataclass
class RunResult:
    run_id: str
    metrics: dict[str, float]
    data_source: str = ""  # where the data came from (a file, a download, a generator)


def params_of(spec: RunSpec, algorithms: list[Algorithm]) -> dict[str, Any]:
    """Flat params: every setting of the recipe and every method (the run's own instances, in arm order)
    with its hyperparameters and what it declares to the composition check (`effects_param`), as stable strings."""
    params: dict[str, Any] = {}
    for key, value in spec.group_config().items():
        if key == "methods":
            continue
        if isinstance(value, dict):
            params.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            params[key] = value
    params.update({f"optimizer.{k}": v for k, v in spec.optimizer_settings().items()})  # as the arm builds it
    params["methods"] = spec.arm_name
    for (name, kwargs), algorithm in zip(spec.method_kwargs(), algorithms, strict=True):
        name = base_method(name)  # a variant's settings under its method's name: what a claim's settings match
        params[f"method.{name}"] = repr(algorithm)
        params.update({f"method.{name}.{k}": v for k, v in kwargs.items()})
        key, declared = effects_param(name, DeclaredMethod.of(algorithm))  # read by the reading wing's recipe search
        params[key] = declared
    params["recipe"] = spec.recipe.name
    params["config_hash"] = spec.config_hash
    return {k: ("None" if v is None else v) for k, v in params.items()}


# Building the run -----------------------------------------------------------------------
@dataclass
class RunLoaders:
    """What a run trains and evaluates on: the two loaders, the dataset behind them, and for text the
    tokenizer the model must share."""

    train: Any
    eval: Any
    dataset: datasets.ImageData | datasets.TextData
    tokenizer: Any = None


class Shard(TypedDict):
    """This process's share of every batch under torchrun, as the loaders take it."""

    rank: int
    world_size: int


def build_data(recipe: Recipe, seed: int, device: torch.device, data_dir: str | None, download: bool) -> RunLoaders:
    """The recipe's dataset and its loaders: image batches ``(images, labels)``, text batches dicts; under torchrun,
    this rank's share of each (global) batch (`scale_out`)."""
    shard: Shard = {"rank": distributed.get_rank(), "world_size": distributed.get_world_size()}
    dataset = resident.load_dataset(
        recipe.data, data_dir=data_dir, subset=recipe.subset, eval_subset=recipe.eval_subset, download=download
    )
    eval_batch_size = recipe.eval_batch_size or max(recipe.batch_size, 256)
    if isinstance(dataset, datasets.TextData):
        vocab_size = recipe.model_kwargs.get("vocab_size", DEFAULT_VOCAB_SIZE)  # the tokenizer trained here
        tokenizer = build_tokenizer(recipe.model, dataset.train_text, vocab_size)
        if recipe.task == "causal_lm":
            train, evaluate = (
                _language_loader(tokenizer, texts, recipe, device, seed, batch_size, train, shard)
                for texts, batch_size, train in (
                    (dataset.train_text, recipe.batch_size, True),
                    (dataset.test_text, eval_batch_size, False),
                )
            )
            return RunLoaders(train, evaluate, dataset, tokenizer)
        train, evaluate = (
            _text_loader(tokenizer, texts, labels, recipe, device, seed, batch_size, train, shard)
            for texts, labels, batch_size, train in (
                (dataset.train_text, dataset.train_y, recipe.batch_size, True),
                (dataset.test_text, dataset.test_y, eval_batch_size, False),
            )
        )
        return RunLoaders(train, evaluate, dataset, tokenizer)
    if recipe.loader == "dataloader":  # per-rank batches: the Trainer's sampler shards a DataLoader
        return _image_dataloaders(dataset, recipe, eval_batch_size, shard["world_size"])
    augment = loaders.make_augment(recipe.augment, int(dataset.train_x.shape[-1]), seed)
    train = loaders.TensorLoader(
        resident.on_device((dataset.train_x, dataset.train_y), device),
        batch_size=recipe.batch_size,
        shuffle=True,
        drop_last=True,
        augment=augment,
        seed=seed,
        channels_last=recipe.channels_last,
        **shard,
    )
    evaluate = loaders.TensorLoader(
        resident.on_device((dataset.test_x, dataset.test_y), device),
        batch_size=eval_batch_size,
        shuffle=False,
        seed=seed,
        channels_last=recipe.channels_last,
        **shard,
    )
    return RunLoaders(train, evaluate, dataset)


def _image_dataloaders(
    dataset: datasets.ImageData, recipe: Recipe, eval_batch_size: int, world_size: int
) -> RunLoaders:
    """The image `DataLoader`s, their batch sizes per rank (the Trainer's sampler shards them)."""
    train = loaders.image_dataloader(
        dataset.train_x,
        dataset.train_y,
        batch_size=recipe.batch_size // world_size,
        train=True,
        augment=recipe.augment,
        num_workers=recipe.num_workers,
    )
    evaluate = loaders.image_dataloader(
        dataset.test_x, dataset.test_y, batch_size=max(1, eval_batch_size // world_size), train=False,
        augment="none", num_workers=0,
    )  # fmt: skip
    return RunLoaders(train, evaluate, dataset)


def _text_loader(
    tokenizer: Any,
    texts: list[str],
    labels: torch.Tensor,
    recipe: Recipe,
    device: torch.device,
    seed: int,
    batch_size: int,
    train: bool,
    shard: Shard,
) -> loaders.TensorLoader:
    return text_loaders.text_loader(
        tokenizer, texts, labels, max_length=recipe.max_length, device=device, seed=seed, batch_size=batch_size,
        train=train, **shard,
    )  # fmt: skip


def _language_loader(
    tokenizer: Any,
    texts: list[str],
    recipe: Recipe,
    device: torch.device,
    seed: int,
    batch_size: int,
    train: bool,
    shard: Shard,
) -> loaders.TensorLoader:
    return text_loaders.language_loader(
        tokenizer, texts, block_size=recipe.max_length, device=device, seed=seed, batch_size=batch_size, train=train,
        **shard,
    )  # fmt: skip


def build_model(recipe: Recipe, data: RunLoaders) -> Any:
    """The recipe's model, shaped for `data` (classes, channels and statistics of images; the tokenizer of text)."""
    dataset = data.dataset
    if isinstance(dataset, datasets.TextData):
        kwargs = {k: v for k, v in recipe.model_kwargs.items() if k != "vocab_size"}
        model = build_text_model(
            recipe.model,
            tokenizer=data.tokenizer,
            num_labels=dataset.num_classes,
            max_length=recipe.max_length,
            causal_lm=recipe.task == "causal_lm",
            **kwargs,
        )
    else:
        mean, std = resident.channel_stats(dataset)
        model = build_image_model(
            recipe.model,
            num_classes=dataset.num_classes,
            in_channels=dataset.channels,
            mean=mean,
            std=std,
            init_images=dataset.train_x,  # for a model fitted to its data (airbench's whitening)
            **recipe.model_kwargs,
        )
    if recipe.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def compile_config(mode: bool | str) -> dict[str, Any] | None:
    """The Trainer's ``compile_config`` for a recipe's ``compile``: none, torch.compile's defaults, or a mode."""
    if mode is False:
        return None
    return {} if mode is True else {"mode": mode}


def occurrences_apart(mode: bool | str) -> int:
    """Steps of each new piece of work timed apart: the FLOP-counted one; with ``compile`` the next, which compiles
    (the counted one ran eagerly); with CUDA graphs one more, which records the graph after a warm-up call."""
    if mode is False:
        return 1
    return 3 if mode in ("reduce-overhead", "max-autotune") else 2


def build_algorithms(spec: RunSpec) -> list[Algorithm]:
    """Fresh instances of the arm's methods, for this run's Trainer (methods keep per-run state)."""
    return [build_algorithm(name, kwargs) for name, kwargs in spec.method_kwargs()]


def training_procedures(spec: RunSpec, model: Any) -> list[Algorithm]:
    """What every arm's training does beside its methods: the optimizer's Lookahead, the model's own steps
    (airbench's whitening-bias freeze). Part of the baseline, so not in the run's methods."""
    own = getattr(model, "training_procedures", None)
    return [*optimizer_procedures(spec.optimizer_settings()), *(own() if own is not None else [])]


def _mlflow_logger(spec: RunSpec, tracking_uri: str | None, tags: dict[str, str]) -> Any:
    from cadence.loggers import MLFlowLogger

    return MLFlowLogger(
        experiment_name=spec.experiment,
        run_name=spec.run_name,
        tracking_uri=tracking_uri,
        tags={**spec.tags(), **tags},
    )


def execute(
    spec: RunSpec,
    *,
    tracking_uri: str | None = None,
    data_dir: str | None = None,
    download: bool = False,
    progress_bar: bool = True,
    tags: dict[str, str] | None = None,
    run_id_file: str | Path | None = None,
    microbatch_size: int | None = None,
    observers: Sequence[Any] = (),
) -> RunResult:
    """Train `spec` and log it to MLflow; returns the run id and the final metrics. `observers`: callbacks
    added after the harness's own (a profiler, `benchmarks.step_ops`'s op counter); they see, not change.

    Data, model and methods are built, and every method asked whether it applies to them, before the
    MLflow run exists: an input that cannot work raises (`RecipeError`, `NotApplicableError`) and
    leaves no run behind. From the Trainer on, the Trainer ends the MLflow run: FINISHED at
    ``close()``, FAILED (KILLED on Ctrl-C or SIGTERM) when its construction or ``fit`` fails. Only a
    failure in between (logging the params, the Trainer's argument checks) is recorded here.
    """
    recipe = spec.recipe
    check_world(recipe.nproc)  # nproc > 1 runs under cadence-bench's torchrun, one process per rank
    device = require_device(recipe.device)
    rank, world_size = distributed.initialize_from_environment(device)  # gloo on CPU, NCCL on GPUs
    device = distributed.local_device(device)
    torch.backends.cudnn.benchmark = device.type == "cuda"  # autotuned convolutions; each shape's tuning is warm-up
    algorithms = build_algorithms(spec)
    check_arm_composition(spec.arm, algorithms)
    cadence.seed_all(spec.seed)  # the model's initial weights depend on the seed too
    data = build_data(recipe, spec.seed, device, data_dir, download)
    model = build_model(recipe, data)
    check_arm_composition(spec.arm, [*algorithms, *training_procedures(spec, model)])  # e.g. a detector's refusals
    check_applicable(zip(spec.arm, algorithms), model, sample_batch(data.train, data.eval, device))
    timer = RunTimer(QUALITY.get(data.dataset.kind, ACCURACY), recipe.target_accuracy, recipe.warmup_batches)
    flops = FlopCounter(on_count=timer.time_apart, occurrences_apart=occurrences_apart(recipe.compile))
    callbacks: list[Any] = [timer, flops, *observers]  # time (a counted batch is timed apart), training FLOPs
    eval_interval: Any = recipe.eval_interval
    if cycles_of(recipe):  # a cyclic run: evaluations at every cycle's end are the points of its curve
        cycles = CycleEnds(cycles_of(recipe), recipe.eval_interval)
        callbacks.append(cycles)
        eval_interval = cycles.due

    mlflow_logger = _mlflow_logger(spec, tracking_uri, dict(tags or {}))
    try:
        if run_id_file is not None and rank == 0:  # only rank 0 has a run (the logger is inert on the others)
            Path(run_id_file).write_text(mlflow_logger.run_id)
        scale = {"world_size": world_size, "sharding": sharding(recipe.fsdp, world_size)}
        tokenizer = {"tokenizer_sha256": tokenizer_sha256(data.tokenizer)} if data.tokenizer is not None else {}
        mlflow_logger.log_hyperparameters(
            {**params_of(spec, algorithms), **environment(device), **scale, "data_source": data.dataset.source}
            | tokenizer
        )
        _log_config(mlflow_logger, spec)
        trainer = cadence.Trainer(
            model=model,
            train_dataloader=data.train,
            eval_dataloader=data.eval,
            eval_interval=eval_interval,
            max_duration=recipe.duration,
            optimizers=build_optimizer(spec.optimizer_settings(), model),
            schedulers=build_schedulers(recipe),
            algorithms=[*algorithms, *training_procedures(spec, model)],
            callbacks=callbacks,
            loggers=[mlflow_logger],
            device=device,
            precision=recipe.resolved_precision,
            device_train_microbatch_size=microbatch_size or recipe.device_train_microbatch_size,
            seed=spec.seed,
            run_name=spec.run_name,
            progress_bar=progress_bar,
            compile_config=compile_config(recipe.compile),  # forward and loss; the model stays uncompiled
            parallelism_config=parallelism_config(recipe.fsdp),  # FSDP2, else DDP when world_size > 1
        )
    except BaseException as error:  # no Trainer owns the run yet (if its __init__ did finish it, this is a no-op)
        mlflow_logger.finish(
            "KILLED" if isinstance(error, (KeyboardInterrupt, RunTerminated)) else "FAILED", error=error
        )
        raise
    try:
        trainer.fit()
        compiled = compile_summary(trainer)
        trainer.logger.log_metrics(compiled)
    finally:
        trainer.close()
    metrics = {**timer.summary(device), **flops.summary(), **compiled}
    if (warning := data_bound_warning(metrics, spec.run_name)) and distributed.get_rank() == 0:
        print(warning, file=sys.stderr, flush=True)
    return RunResult(mlflow_logger.run_id, metrics, data.dataset.source)


def compile_summary(trainer: cadence.Trainer) -> dict[str, float]:
    """A compiled run's ``final/compiled_graphs``, ``final/graph_breaks``, ``final/cudagraph_skips`` and
    ``final/compile_disabled``: whether its timings are those of compiled code (an uncompiled run: none)."""
    if trainer.compiled is None:
        return {}
    return {f"final/{name.removeprefix('trainer/')}": float(v) for name, v in trainer.compiled.report().items()}


def _log_config(mlflow_logger: Any, spec: RunSpec) -> None:
    """The resolved configuration, as a JSON artifact (params are flattened and may be truncated)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps({"config": spec.config(), "config_hash": spec.config_hash}, indent=2, default=str))
        mlflow_logger.log_artifact(path)
