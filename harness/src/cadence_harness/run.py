"""One run, in this process: build data, model and methods from a `RunSpec`, train, log to MLflow.

Every run logs, through the core's batched `MLFlowLogger`: params (model, data, each method
with all its hyperparameters, seed, batch size, precision, device, versions, git sha), the
per-step loss and per-evaluation metrics, ``time/*`` and ``final/*`` timings, throughput and
peak memory, and the resolved configuration as an artifact. A failure marks the run FAILED
(KILLED on Ctrl-C) with the error in the ``cadence.error`` tag, then propagates.
"""

from __future__ import annotations

import json
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import cadence
from cadence_harness import data as datasets
from cadence_harness import loaders
from cadence_harness.models import build_image_model, build_text_model, tokenize
from cadence_harness.recipe import OPTIMIZERS, SCHEDULES, Recipe, build_algorithm
from cadence_harness.runspec import RunSpec
from cadence_harness.timing import RunTimer

__all__ = ["RunResult", "environment", "execute", "git_sha"]

ACCURACY = "MulticlassAccuracy"


@dataclass
class RunResult:
    run_id: str
    metrics: dict[str, float]


def git_sha(start: Path | None = None) -> str:
    """The commit checked out in the repository holding this file, read from ``.git`` (no git needed)."""
    folder = (start or Path(__file__)).resolve()
    for parent in [folder, *folder.parents]:
        head = parent / ".git" / "HEAD"
        if not head.is_file():
            continue
        ref = head.read_text().strip()
        if not ref.startswith("ref:"):
            return ref
        name = ref.split(" ", 1)[1]
        loose = parent / ".git" / name
        if loose.is_file():
            return loose.read_text().strip()
        packed = parent / ".git" / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + name):
                    return line.split(" ", 1)[0]
        return "unknown"
    return "unknown"


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def environment(device: torch.device) -> dict[str, str]:
    """The machine and software a run ran on (logged as params, so results can be compared honestly)."""
    env = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "cpu_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "versions.torch": torch.__version__,
        "versions.cadence": cadence.__version__,
        "versions.cadence_harness": _version("cadence-harness"),
        "git_sha": git_sha(),
    }
    for package in ("torchvision", "timm", "transformers"):
        env[f"versions.{package}"] = _version(package)
    if device.type == "cuda":
        env["versions.cuda"] = str(torch.version.cuda)
        env["cuda_driver"] = _driver_version()
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver_version() -> str:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, IndexError):
        return "unknown"


def params_of(spec: RunSpec) -> dict[str, Any]:
    """Flat params: every setting of the recipe and every method hyperparameter, as stable strings."""
    params: dict[str, Any] = {}
    for key, value in spec.group_config().items():
        if key == "methods":
            continue
        if isinstance(value, dict):
            params.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            params[key] = value
    params["methods"] = spec.arm_name
    for name, kwargs in spec.method_kwargs():
        algorithm = build_algorithm(name, kwargs)
        params[f"method.{name}"] = repr(algorithm)
        params.update({f"method.{name}.{k}": v for k, v in kwargs.items()})
    params["recipe"] = spec.recipe.name
    params["config_hash"] = spec.config_hash
    return {k: ("None" if v is None else v) for k, v in params.items()}


# Building the run -----------------------------------------------------------------------
def _device(recipe: Recipe) -> torch.device:
    if recipe.device == "gpu":
        if not torch.cuda.is_available():
            raise RuntimeError("the recipe says device = 'gpu' but CUDA is not available; use --device cpu")
        return torch.device("cuda")
    return torch.device("cpu")


def build_loaders(
    recipe: Recipe, seed: int, device: torch.device, data_dir: str | None, download: bool
) -> tuple[Any, Any, Any, str]:
    """(model, train loader, eval loader, data source) for a recipe."""
    dataset = datasets.load_dataset(
        recipe.data, data_dir=data_dir, subset=recipe.subset, eval_subset=recipe.eval_subset, download=download
    )
    eval_batch_size = recipe.eval_batch_size or max(recipe.batch_size, 256)
    if isinstance(dataset, datasets.TextData):
        model, tokenizer = build_text_model(
            recipe.model,
            num_labels=dataset.num_classes,
            train_texts=dataset.train_text,
            max_length=recipe.max_length,
            **recipe.model_kwargs,
        )
        loaders_ = []
        for texts, labels, train in (
            (dataset.train_text, dataset.train_y, True),
            (dataset.test_text, dataset.test_y, False),
        ):
            encoded = tokenize(tokenizer, texts, recipe.max_length)
            keys = (*encoded, "labels")
            tensors = tuple(t.to(device) for t in (*encoded.values(), labels))
            loaders_.append(
                loaders.TensorLoader(
                    tensors,
                    batch_size=recipe.batch_size if train else eval_batch_size,
                    shuffle=train,
                    drop_last=train,
                    seed=seed,
                    keys=keys,
                    lengths=encoded["attention_mask"].sum(1),
                )
            )
        return model, loaders_[0], loaders_[1], dataset.source
    mean, std = dataset.channel_stats()
    model = build_image_model(
        recipe.model,
        num_classes=dataset.num_classes,
        in_channels=dataset.channels,
        mean=mean,
        std=std,
        **recipe.model_kwargs,
    )
    if recipe.loader == "dataloader":
        train = loaders.image_dataloader(
            dataset.train_x,
            dataset.train_y,
            batch_size=recipe.batch_size,
            train=True,
            augment=recipe.augment,
            num_workers=recipe.num_workers,
        )
        evaluate = loaders.image_dataloader(
            dataset.test_x, dataset.test_y, batch_size=eval_batch_size, train=False, augment="none", num_workers=0
        )
        return model, train, evaluate, dataset.source
    augment = loaders.make_augment(recipe.augment, int(dataset.train_x.shape[-1]))
    common = {"seed": seed, "channels_last": recipe.channels_last}
    train = loaders.TensorLoader(
        (dataset.train_x.to(device), dataset.train_y.to(device)),
        batch_size=recipe.batch_size,
        shuffle=True,
        drop_last=True,
        augment=augment,
        **common,
    )
    evaluate = loaders.TensorLoader(
        (dataset.test_x.to(device), dataset.test_y.to(device)), batch_size=eval_batch_size, shuffle=False, **common
    )
    return model, train, evaluate, dataset.source


def _optimizer(recipe: Recipe, model: torch.nn.Module) -> torch.optim.Optimizer:
    kwargs = {k: v for k, v in recipe.optimizer.items() if k != "name"}
    return OPTIMIZERS[recipe.optimizer["name"]](model.parameters(), **kwargs)


def _schedulers(recipe: Recipe) -> list[Any]:
    cls = SCHEDULES[recipe.schedule["name"]]
    return [] if cls is None else [cls(**{k: v for k, v in recipe.schedule.items() if k != "name"})]


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
) -> RunResult:
    """Train `spec` and log it to MLflow; returns the run id and the final metrics."""
    recipe = spec.recipe
    mlflow_logger = _mlflow_logger(spec, tracking_uri, dict(tags or {}))
    if run_id_file is not None:
        Path(run_id_file).write_text(mlflow_logger.run_id)
    trainer = None
    try:
        device = _device(recipe)
        cadence.seed_all(spec.seed)  # the model's initial weights depend on the seed too
        model, train_loader, eval_loader, source = build_loaders(recipe, spec.seed, device, data_dir, download)
        if recipe.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if recipe.compile:
            model.compile()
        algorithms = [build_algorithm(name, kwargs) for name, kwargs in spec.method_kwargs()]
        timer = RunTimer(ACCURACY, recipe.target_accuracy, recipe.warmup_batches)
        mlflow_logger.log_hyperparameters({**params_of(spec), **environment(device), "data_source": source})
        trainer = cadence.Trainer(
            model=model,
            train_dataloader=train_loader,
            eval_dataloader=eval_loader,
            eval_interval=recipe.eval_interval,
            max_duration=recipe.duration,
            optimizers=_optimizer(recipe, model),
            schedulers=_schedulers(recipe),
            algorithms=algorithms,
            callbacks=[timer],
            loggers=[mlflow_logger],
            device=device,
            precision=recipe.resolved_precision,
            device_train_microbatch_size=microbatch_size or recipe.device_train_microbatch_size,
            seed=spec.seed,
            run_name=spec.run_name,
            progress_bar=progress_bar,
        )
        trainer.fit()
        summary = timer.summary(device)
        _log_config(mlflow_logger, spec)
        trainer.close()
        mlflow_logger.finish("FINISHED")
        return RunResult(mlflow_logger.run_id, summary)
    except BaseException as error:
        status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
        # records cadence.error and cadence.failure (a no-op when Trainer.fit already did)
        mlflow_logger.finish(status, error=error)  # before trainer.close(), which would finish the run as FINISHED
        if trainer is not None:
            trainer.close()
        raise


def _log_config(mlflow_logger: Any, spec: RunSpec) -> None:
    """The resolved configuration, as a JSON artifact (params are flattened and may be truncated)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps({"config": spec.config(), "config_hash": spec.config_hash}, indent=2, default=str))
        mlflow_logger.log_artifact(path)
        mlflow_logger.flush()
