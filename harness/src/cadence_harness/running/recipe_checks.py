"""Checks of a recipe's keys, one per kind of value: each names the key, echoes the value and says the fix.

`RecipeError` is what they raise; the command line answers it with one line and exit code 2.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from cadence import schedulers as cadence_schedulers
from cadence.time import Time, TimeUnit

__all__ = [
    "AUGMENTS",
    "COMPILE_MODES",
    "DATASETS",
    "LOADERS",
    "OPTIMIZERS",
    "OPTIMIZER_EXTRAS",
    "PRECISIONS",
    "REQUIRED",
    "SCHEDULES",
    "TABLES",
    "RecipeError",
    "check_choice",
    "check_dataset",
    "check_int",
    "check_kwargs",
    "check_optimizer",
    "check_schedule",
    "check_time",
    "check_types",
    "did_you_mean",
    "fail",
    "normalise_seeds",
    "unknown_key",
]


class _Optimizers(Mapping[str, type[torch.optim.Optimizer]]):
    """``optimizer.name`` -> class: torch's SGD, Adam and AdamW, and the decoupled-weight-decay optimizers
    (``decoupled_sgdw``, ``decoupled_adamw``: decay that follows the LR schedule) when `cadence-decoupled-weight-decay`
    is installed. Looked up in the method registry on first use, so importing the harness loads no method."""

    _TORCH = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW, "adam": torch.optim.Adam}
    _METHODS = {"decoupled_sgdw": "DecoupledSGDW", "decoupled_adamw": "DecoupledAdamW"}

    def _table(self) -> dict[str, type[torch.optim.Optimizer]]:
        from cadence.registry import registry

        installed = registry().functions
        methods = {key: installed[name] for key, name in self._METHODS.items() if name in installed}
        return {**self._TORCH, **methods}

    def __getitem__(self, name: str) -> type[torch.optim.Optimizer]:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


OPTIMIZERS: Mapping[str, type[torch.optim.Optimizer]] = _Optimizers()
SCHEDULES: dict[str, type[cadence_schedulers.Scheduler] | None] = {
    "constant": None,
    "cosine": cadence_schedulers.CosineAnnealingScheduler,
    "cosine_warmup": cadence_schedulers.CosineAnnealingWithWarmupScheduler,
    "linear": cadence_schedulers.LinearScheduler,
    "linear_warmup": cadence_schedulers.LinearWithWarmupScheduler,
    "multistep": cadence_schedulers.MultiStepScheduler,
    "multistep_warmup": cadence_schedulers.MultiStepWithWarmupScheduler,
}
LOADERS = ("tensor", "dataloader")
TASKS = ("classification", "causal_lm")  # causal_lm: next-token prediction on the text of a text dataset
AUGMENTS = ("none", "flip", "flip_crop", "alt_flip_translate")
#: ``[optimizer]`` keys the harness reads itself (`cadence_harness.running.optimizer`), not the optimizer class.
OPTIMIZER_EXTRAS = ("norm_lr_scale", "lookahead")
PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
#: torch.compile's modes a recipe's ``compile`` may name (``true``: the default); "reduce-overhead" adds CUDA graphs
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
REQUIRED = ("name", "model", "data", "duration")
TABLES = ("model_kwargs", "optimizer", "schedule", "methods", "grid", "fsdp")


def resolved_precision(precision: str | None, device: str | None) -> str:
    """A recipe's precision: its own, else bf16 autocast on a GPU and fp32 on a CPU."""
    if precision is not None:
        return precision
    return "amp_bf16" if device == "gpu" else "fp32"


class RecipeError(ValueError):
    """A recipe, a command-line flag or this machine cannot run it: one line naming the key and the fix.

    The command line answers it with that line on stderr and exit code 2, before anything trains.
    """


def fail(key: str, value: Any, problem: str) -> RecipeError:
    return RecipeError(f"`{key}` = {value!r}: {problem}")


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> str:
    """``"did you mean 'cifar10'? "`` for the closest of `known` (``'a' or 'b'``, up to `n` of them), or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=n)
    return f"did you mean {' or '.join(map(repr, close))}? " if close else ""


def unknown_key(
    key: str, known: list[str], where: str = "recipe", values: Mapping[str, Any] | None = None
) -> RecipeError:
    """The error for an unknown key; a key that one of the recipe's tables holds (``lr`` for ``optimizer.lr``)
    is named with its table, as ``--set`` takes it."""
    tables = {name: table for name, table in (values or {}).items() if isinstance(table, Mapping) and name != "methods"}
    tables |= {name: table for name, table in (values or {}).get("methods", {}).items() if isinstance(table, Mapping)}
    nested = [f"`{name}.{key}`" for name, table in tables.items() if key in table]
    hint = f"did you mean {' or '.join(nested)}? " if nested else did_you_mean(key.rsplit(".", 1)[-1], known)
    return RecipeError(f"unknown {where} key `{key}`; {hint}known keys: {', '.join(sorted(known))}")


def check_int(key: str, value: Any, minimum: int = 1, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(key, value, f"must be an int >= {minimum}")


def check_choice(key: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise fail(key, value, f"must be one of {', '.join(map(repr, choices))}")


def check_time(key: str, value: Any, units: tuple[TimeUnit, ...]) -> Time:
    examples = " or ".join(repr(f"{n}{u.value}") for n, u in zip((10, 500, 60_000), units))  # only units allowed here
    try:
        time = Time.from_input(value)
    except (TypeError, ValueError) as error:  # the reason, without the core's examples of units not allowed here
        reason = str(error).split(";")[0]
        raise fail(key, value, f"not a duration ({reason}); write a number and a unit, e.g. {examples}") from None
    if time.unit not in units:
        raise fail(key, value, f"use one of the units {', '.join(u.value for u in units)}, e.g. {examples}")
    if time.value <= 0:
        raise fail(key, value, "must be > 0")
    return time


def check_kwargs(key: str, kwargs: Mapping[str, Any], target: Any, exclude: tuple[str, ...] = ()) -> None:
    """Every key of `kwargs` must be a parameter of `target` (a class or a function)."""
    parameters = inspect.signature(target).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = [name for name in parameters if name not in ("self", *exclude)]
    for name in kwargs:
        if name not in accepted:
            hint = did_you_mean(name, accepted)
            raise RecipeError(
                f"unknown key `{key}.{name}`: {getattr(target, '__name__', target)} takes no {name!r}; "
                f"{hint}it takes: {', '.join(accepted) or 'nothing'}"
            )


def check_optimizer(optimizer: Mapping[str, Any]) -> None:
    name = optimizer.get("name", "sgd")
    check_choice("optimizer.name", name, list(OPTIMIZERS))
    kwargs = {k: v for k, v in optimizer.items() if k not in ("name", *OPTIMIZER_EXTRAS)}
    check_kwargs("optimizer", kwargs, OPTIMIZERS[name], exclude=("params",))
    lr = kwargs.get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise fail("optimizer.lr", lr, "must be a number > 0")


def check_schedule(schedule: Mapping[str, Any]) -> None:
    name = schedule.get("name", "constant")
    check_choice("schedule.name", name, list(SCHEDULES))
    cls = SCHEDULES[name]
    kwargs = {k: v for k, v in schedule.items() if k != "name"}
    if cls is None:
        if kwargs:
            raise unknown_key(f"schedule.{next(iter(kwargs))}", ["name"], "schedule")
        return
    check_kwargs("schedule", kwargs, cls)
    try:
        cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"`schedule` = {dict(schedule)!r}: {error}") from None


def check_types(values: Mapping[str, Any]) -> None:
    for key in REQUIRED:
        if key not in values:
            raise RecipeError(f"the recipe has no `{key}`; every recipe needs {', '.join(REQUIRED)}")
    for key in ("name", "model", "data", "description"):
        if key in values and (not isinstance(values[key], str) or (key != "description" and not values[key])):
            raise fail(key, values[key], "must be a non-empty string")
    for key in TABLES:
        if key in values and not isinstance(values[key], Mapping) and not (key == "fsdp" and values[key] is None):
            raise fail(key, values[key], "must be a table, e.g. [optimizer] or {lr = 0.1}")
    check_int("batch_size", values.get("batch_size", 1))
    for key in ("subset", "eval_subset", "eval_batch_size", "device_train_microbatch_size"):
        check_int(key, values.get(key), optional=True)
    check_int("max_length", values.get("max_length", 8), minimum=8)
    check_int("num_workers", values.get("num_workers", 0), minimum=0)
    check_int("warmup_batches", values.get("warmup_batches", 0), minimum=0)
    if not isinstance(values.get("channels_last", False), bool):
        raise fail("channels_last", values["channels_last"], "must be true or false")
    compile_mode = values.get("compile", False)
    if not isinstance(compile_mode, bool) and compile_mode not in COMPILE_MODES:
        raise fail("compile", compile_mode, f"must be true, false or a torch.compile mode: {', '.join(COMPILE_MODES)}")
    check_choice("device", values.get("device", "cpu"), ("cpu", "gpu"))
    if values.get("precision") is not None:
        check_choice("precision", values["precision"], PRECISIONS)
    check_choice("loader", values.get("loader", "tensor"), LOADERS)
    check_choice("task", values.get("task", "classification"), TASKS)
    check_choice("augment", values.get("augment", "none"), AUGMENTS)
    target = values.get("target_accuracy")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1):
        raise fail("target_accuracy", target, "must be a fraction in (0, 1], e.g. 0.94")


def normalise_seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise fail("seeds", value, "a count of seeds must be >= 1")
        return tuple(range(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise fail("seeds", value, "seeds must be distinct")
        return tuple(value)
    raise fail("seeds", value, "give a count (3) or a list of distinct non-negative ints ([0, 1, 2])")


# Budgets: a sweep of durations or a cyclic curve (run by `cadence_harness.running.budgets`) --------
CURVES = ("sweep", "cyclic")
SCHEDULE_TIMES = ("t_max", "t_warmup", "milestones")  # the schedule arguments that are times


def check_budgets(values: dict[str, Any]) -> tuple[str, ...]:
    """Check ``durations`` and ``curve`` of a recipe's values, and fill in ``duration`` from them.

    Returns the budgets (empty when the recipe has one ``duration``). Raises `RecipeError` naming the key.
    """
    durations = values.get("durations", [])
    curve = values.get("curve", "sweep")
    if curve not in CURVES:
        raise fail("curve", curve, f"must be one of {', '.join(map(repr, CURVES))}")
    if not isinstance(durations, (list, tuple)) or not all(isinstance(d, str) for d in durations):
        raise fail("durations", durations, "must be a list of budgets, e.g. ['2ep', '4ep', '8ep', '16ep']")
    if not durations:
        if curve == "cyclic":
            raise fail("curve", curve, "a cyclic curve needs `durations`: the budgets where its cycles end")
        return ()
    times = [check_time(f"durations[{i}]", d, (TimeUnit.EPOCH, TimeUnit.BATCH)) for i, d in enumerate(durations)]
    if len(times) < 2:
        raise fail("durations", list(durations), "a curve needs at least two budgets; for one, write `duration`")
    if len({t.unit for t in times}) > 1:
        raise fail("durations", list(durations), "give every budget in one unit (all ep or all ba)")
    if any(b.value <= a.value for a, b in itertools.pairwise(times)):
        raise fail("durations", list(durations), "budgets must increase, e.g. ['2ep', '4ep', '8ep']")
    if "duration" in values and values["duration"] != durations[-1]:
        raise fail(
            "duration",
            values["duration"],
            f"the recipe also gives `durations` = {list(durations)!r}: give one budget (`duration`) or a sweep "
            "(`durations`); on the command line --duration replaces the sweep",
        )
    values["duration"] = durations[-1]
    return tuple(durations)


def check_decays(schedule: dict[str, Any]) -> None:
    """With several budgets, the schedule must decay fully within each run: its times are fractions of the run."""
    name = schedule.get("name", "constant")
    if SCHEDULES.get(name) is None:
        decaying = ", ".join(n for n, cls in SCHEDULES.items() if cls is not None)
        raise fail(
            "schedule.name",
            name,
            f"with `durations`, the learning rate must decay by the end of every budget; use one of {decaying}",
        )
    for key in SCHEDULE_TIMES:
        if key not in schedule:
            continue
        given = schedule[key]
        for value in given if isinstance(given, list) else [given]:
            try:
                unit = Time.from_input(value, TimeUnit.BATCH).unit
            except (TypeError, ValueError):
                continue  # the scheduler's own check names it
            if unit is not TimeUnit.DURATION:
                raise fail(
                    f"schedule.{key}",
                    given,
                    "with `durations`, every schedule time is a fraction of the run ('1dur', '0.1dur'), so that "
                    "each budget's schedule ends where its run ends",
                )


# Datasets: their names and kinds (the loaders are `cadence_harness.running.data`) -------------------
DATASETS: dict[str, str] = {
    "cifar10": "image",
    "fashion_mnist": "image",
    "digits": "image",
    "synthetic": "image",
    "sst2": "text",
    "synthetic_text": "text",
    "detection_shapes": "detection",  # boxes (cadence-detection): only detectors train on it
}


def check_dataset(name: str) -> None:
    if name not in DATASETS:
        hint = did_you_mean(name, DATASETS)
        raise ValueError(f"`data` = {name!r}: unknown dataset; {hint}known: {', '.join(sorted(DATASETS))}")
