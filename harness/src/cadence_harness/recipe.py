"""Recipes: small TOML (or YAML) files that say what to train and which methods to compare.

Everything is checked before anything runs, and every error names the bad key and echoes
its value. A recipe looks like::

    name = "fashion_mnist_resnet20"     # also the MLflow experiment
    model = "tv/resnet20"
    data = "fashion_mnist"
    duration = "10ep"
    batch_size = 128
    seeds = 3
    target_accuracy = 0.90

    [optimizer]
    name = "sgd"
    lr = 0.1

    [methods.mixup]                     # hyperparameters of each method the grid uses
    alpha = 0.2

    [grid]
    arms = ["baseline", "each"]         # baseline, each, leave_one_out, pairs, all
    combinations = [["mixup", "label_smoothing"]]
"""

from __future__ import annotations

import copy
import difflib
import inspect
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from cadence import Algorithm
from cadence import schedulers as cadence_schedulers
from cadence.registry import MethodInfo, canonical_name, registry
from cadence.time import Time, TimeUnit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ARMS",
    "OPTIMIZERS",
    "SCHEDULES",
    "Recipe",
    "RecipeError",
    "apply_overrides",
    "build_algorithm",
    "did_you_mean",
    "load_recipe",
    "method_names",
    "parse_recipe",
]

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
ARMS = ("baseline", "each", "leave_one_out", "pairs", "all")
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD,
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
}
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
AUGMENTS = ("none", "flip", "flip_crop")
PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
DEFAULT_GRID: dict[str, Any] = {"arms": ["baseline", "each"]}


class RecipeError(ValueError):
    """A recipe, a command-line flag or this machine cannot run it: one line naming the key and the fix.

    The command line answers it with that line on stderr and exit code 2, before anything trains.
    """


@dataclass(frozen=True)
class Recipe:
    """A validated recipe: plain values only. `methods` holds each method's hyperparameters (keyed by
    registry name); `grid` says which arms run.

    `parse_recipe` validates; `to_dict` / `from_dict` carry a validated recipe to a worker process,
    which rebuilds it without validating again.
    """

    name: str
    model: str
    data: str
    duration: str
    batch_size: int = 128
    description: str = ""
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    subset: int | None = None
    eval_subset: int | None = None
    max_length: int = 64
    loader: str = "tensor"
    augment: str = "none"
    num_workers: int = 0
    eval_batch_size: int | None = None
    eval_interval: str = "1ep"
    device: str = "cpu"
    precision: str | None = None
    channels_last: bool = False
    compile: bool = False
    warmup_batches: int = 0
    device_train_microbatch_size: int | None = None
    seeds: tuple[int, ...] = (0,)
    target_accuracy: float | None = None
    optimizer: dict[str, Any] = field(default_factory=lambda: {"name": "sgd", "lr": 0.1})
    schedule: dict[str, Any] = field(default_factory=lambda: {"name": "constant"})
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    grid: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_GRID))
    source: str = ""  # the file it came from (not part of any run's identity)
    # The instance of each method that validation built (not a setting: never serialised nor compared).
    _algorithms: dict[str, Algorithm] = field(default_factory=dict, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.init}
        data["seeds"] = list(self.seeds)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipe:
        """The recipe `to_dict` wrote, as it was validated (nothing is checked or built again)."""
        return cls(**{**data, "seeds": tuple(data["seeds"])})

    def algorithm(self, name: str) -> Algorithm:
        """The instance of method `name` that validation built, for questions about the method (its repr,
        whether it applies to a model and batch). It never trains: every run builds its own."""
        if name not in self._algorithms:  # a recipe that was not validated in this process
            self._algorithms[name] = build_algorithm(name, self.methods.get(name, {}))
        return self._algorithms[name]

    @property
    def resolved_precision(self) -> str:
        if self.precision is not None:
            return self.precision
        return "amp_bf16" if self.device == "gpu" else "fp32"

    @property
    def grid_methods(self) -> list[str]:
        return list(self.grid.get("methods", list(self.methods)))


_FIELDS = {f.name: f for f in fields(Recipe) if f.init}
_REQUIRED = ("name", "model", "data", "duration")
_TABLES = ("model_kwargs", "optimizer", "schedule", "methods", "grid")


def _fail(key: str, value: Any, problem: str) -> RecipeError:
    return RecipeError(f"`{key}` = {value!r}: {problem}")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'cifar10'? "`` for the closest of `known`, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _unknown_key(key: str, known: list[str], where: str = "recipe") -> RecipeError:
    hint = did_you_mean(key.rsplit(".", 1)[-1], known)
    return RecipeError(f"unknown {where} key `{key}`; {hint}known keys: {', '.join(sorted(known))}")


def _check_int(key: str, value: Any, minimum: int = 1, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, value, f"must be an int >= {minimum}")


def _check_choice(key: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise _fail(key, value, f"must be one of {', '.join(map(repr, choices))}")


def _check_time(key: str, value: Any, units: tuple[TimeUnit, ...]) -> Time:
    try:
        time = Time.from_input(value)
    except (TypeError, ValueError) as error:
        raise _fail(key, value, f"not a duration ({error})") from None
    if time.unit not in units:
        raise _fail(key, value, f"use one of the units {', '.join(u.value for u in units)}, e.g. '10ep' or '500ba'")
    if time.value <= 0:
        raise _fail(key, value, "must be > 0")
    return time


def _check_kwargs(key: str, kwargs: Mapping[str, Any], target: Any, exclude: tuple[str, ...] = ()) -> None:
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


def _method_info(name: Any) -> MethodInfo:
    """The registry entry of method `name` (any spelling: ``mixup``, ``MixUp``, ``mix-up``); errors suggest."""
    if not isinstance(name, str):
        raise _fail("methods", name, "method names are strings, e.g. 'mixup'")
    try:
        return registry().method(name)
    except KeyError as error:
        message = f"`methods.{name}`: {error.args[0]}"
        if "did you mean" not in message:  # no close match: it may just not be installed
            message += f"; a method package installs with `pip install -e packages/methods/{canonical_name(name)}`"
        raise RecipeError(message) from None


def method_names(names: Iterable[str], key: str = "methods") -> tuple[str, ...]:
    """Each name as the registry spells it (``MixUp`` -> ``mixup``), so one method is one arm, one hash."""
    resolved: dict[str, str] = {}
    for name in names:
        registered = _method_info(name).name
        if registered in resolved:
            raise _fail(key, list(names), f"lists {registered!r} twice (as {resolved[registered]!r} and {name!r})")
        resolved[registered] = name
    return tuple(resolved)


def build_algorithm(name: str, kwargs: Mapping[str, Any]) -> Algorithm:
    """Construct the installed method `name` with `kwargs`; errors name `methods.<name>`."""
    info = _method_info(name)
    _check_kwargs(f"methods.{name}", kwargs, info.algorithm)
    try:
        return info.algorithm(**kwargs)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"`methods.{name}` = {dict(kwargs)!r}: bad hyperparameters: {error}") from None


def _validate_optimizer(optimizer: Mapping[str, Any]) -> None:
    name = optimizer.get("name", "sgd")
    _check_choice("optimizer.name", name, list(OPTIMIZERS))
    kwargs = {k: v for k, v in optimizer.items() if k != "name"}
    _check_kwargs("optimizer", kwargs, OPTIMIZERS[name], exclude=("params",))
    lr = kwargs.get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise _fail("optimizer.lr", lr, "must be a number > 0")


def _validate_schedule(schedule: Mapping[str, Any]) -> None:
    name = schedule.get("name", "constant")
    _check_choice("schedule.name", name, list(SCHEDULES))
    cls = SCHEDULES[name]
    kwargs = {k: v for k, v in schedule.items() if k != "name"}
    if cls is None:
        if kwargs:
            raise _unknown_key(f"schedule.{next(iter(kwargs))}", ["name"], "schedule")
        return
    _check_kwargs("schedule", kwargs, cls)
    try:
        cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"`schedule` = {dict(schedule)!r}: {error}") from None


def _method_table(table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``[methods.<name>]`` tables keyed by registry name; two spellings of one method merge, later keys win."""
    methods: dict[str, dict[str, Any]] = {}
    for name, kwargs in table.items():
        if not isinstance(kwargs, Mapping):
            raise _fail(f"methods.{name}", kwargs, "must be a table of hyperparameters, e.g. {alpha = 0.2}")
        methods.setdefault(_method_info(name).name, {}).update(kwargs)
    return methods


def _excluded(names: Any) -> set[str]:
    """``grid.exclude`` as registry names; names of methods not installed here are fine (nothing to exclude)."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise _fail("grid.exclude", names, "must be a list of method names")
    excluded = set()
    for name in names:
        try:
            excluded.add(registry().method(name).name)
        except KeyError:
            excluded.add(canonical_name(name))
    return excluded


def _resolve_grid(grid: Mapping[str, Any]) -> dict[str, Any]:
    """Check the grid; method names become registry names, ``methods = "installed"`` every installed one not in
    ``exclude``."""
    known = ["arms", "methods", "combinations", "exclude"]
    for key in grid:
        if key not in known:
            raise _unknown_key(f"grid.{key}", known, "grid")
    resolved = dict(grid)
    given_exclude = resolved.pop("exclude", [])
    exclude = _excluded(given_exclude)
    arms = resolved.get("arms", [])
    if not isinstance(arms, list):
        raise _fail("grid.arms", arms, f"must be a list of {', '.join(ARMS)}")
    for arm in arms:
        _check_choice("grid.arms", arm, ARMS)
    names = resolved.get("methods")
    if names == "installed":
        resolved["methods"] = [name for name in sorted(registry().methods) if name not in exclude]
    elif exclude:
        raise _fail("grid.exclude", given_exclude, 'only applies with methods = "installed"')
    elif names is not None:
        if not isinstance(names, list):
            raise _fail("grid.methods", names, 'must be a list of method names, or "installed"')
        resolved["methods"] = list(method_names(names, "grid.methods"))
    combos = resolved.get("combinations", [])
    if not isinstance(combos, list) or not all(isinstance(c, list) for c in combos):
        raise _fail("grid.combinations", combos, 'must be a list of lists of method names, e.g. [["mixup", "cutout"]]')
    if combos:
        resolved["combinations"] = [list(method_names(combo, "grid.combinations")) for combo in combos]
    return resolved


def _validate_types(values: Mapping[str, Any]) -> None:
    for key in _REQUIRED:
        if key not in values:
            raise RecipeError(f"the recipe has no `{key}`; every recipe needs {', '.join(_REQUIRED)}")
    for key in ("name", "model", "data", "description"):
        if key in values and (not isinstance(values[key], str) or (key != "description" and not values[key])):
            raise _fail(key, values[key], "must be a non-empty string")
    for key in _TABLES:
        if key in values and not isinstance(values[key], Mapping):
            raise _fail(key, values[key], "must be a table, e.g. [optimizer] or {lr = 0.1}")
    _check_int("batch_size", values.get("batch_size", 1))
    for key in ("subset", "eval_subset", "eval_batch_size", "device_train_microbatch_size"):
        _check_int(key, values.get(key), optional=True)
    _check_int("max_length", values.get("max_length", 8), minimum=8)
    _check_int("num_workers", values.get("num_workers", 0), minimum=0)
    _check_int("warmup_batches", values.get("warmup_batches", 0), minimum=0)
    for key in ("channels_last", "compile"):
        if not isinstance(values.get(key, False), bool):
            raise _fail(key, values[key], "must be true or false")
    _check_choice("device", values.get("device", "cpu"), ("cpu", "gpu"))
    if values.get("precision") is not None:
        _check_choice("precision", values["precision"], PRECISIONS)
    _check_choice("loader", values.get("loader", "tensor"), LOADERS)
    _check_choice("augment", values.get("augment", "none"), AUGMENTS)
    target = values.get("target_accuracy")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1):
        raise _fail("target_accuracy", target, "must be a fraction in (0, 1], e.g. 0.94")


def _normalise_seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise _fail("seeds", value, "a count of seeds must be >= 1")
        return tuple(range(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise _fail("seeds", value, "seeds must be distinct")
        return tuple(value)
    raise _fail("seeds", value, "give a count (3) or a list of distinct non-negative ints ([0, 1, 2])")


def parse_recipe(values: Mapping[str, Any], source: str = "") -> Recipe:
    """Validate a recipe given as a dict (a parsed TOML/YAML file, after overrides)."""
    from cadence_harness.data import check_dataset
    from cadence_harness.models import check_model

    for key in values:
        if key not in _FIELDS or key == "source":
            raise _unknown_key(key, [k for k in _FIELDS if k != "source"])
    _validate_types(values)
    _check_time("duration", values["duration"], (TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE))
    _check_time("eval_interval", values.get("eval_interval", "1ep"), (TimeUnit.EPOCH, TimeUnit.BATCH))
    try:
        check_model(values["model"], values["data"])
        check_dataset(values["data"])
    except ValueError as error:
        raise RecipeError(str(error)) from None
    methods = _method_table(values.get("methods", {}))
    optimizer = {"name": "sgd", "lr": 0.1, **dict(values.get("optimizer", {}))}
    _validate_optimizer(optimizer)
    schedule = {"name": "constant", **dict(values.get("schedule", {}))}
    _validate_schedule(schedule)
    grid = _resolve_grid(values.get("grid", DEFAULT_GRID))
    used = [*methods, *grid.get("methods", []), *(name for combo in grid.get("combinations", []) for name in combo)]
    algorithms = {name: build_algorithm(name, methods.get(name, {})) for name in dict.fromkeys(used)}  # once each
    kwargs = {k: v for k, v in values.items() if k not in ("methods", "optimizer", "schedule", "grid", "seeds")}
    kwargs["model_kwargs"] = dict(values.get("model_kwargs", {}))
    recipe = Recipe(
        **kwargs,
        seeds=_normalise_seeds(values.get("seeds", [0])),
        optimizer=optimizer,
        schedule=schedule,
        methods=methods,
        grid=grid,
        source=source,
    )
    recipe._algorithms.update(algorithms)
    return recipe


def resolve_recipe_path(name_or_path: str | Path) -> Path:
    """A file path, or the name of a shipped recipe (``demo`` is ``harness/recipes/demo.toml``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (RECIPES_DIR / f"{name_or_path}.toml", RECIPES_DIR / str(name_or_path)):
        if candidate.is_file():
            return candidate
    shipped = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "none"
    raise RecipeError(f"recipe {str(name_or_path)!r} is not a file nor a shipped recipe; shipped: {shipped}")


def read_recipe_file(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = tomllib.loads(text)
    except Exception as error:  # a syntax error: say which file
        raise RecipeError(f"cannot parse recipe {str(path)!r}: {error}") from None
    if not isinstance(values, dict):
        raise RecipeError(f"recipe {str(path)!r} must be a table of keys, got {type(values).__name__}")
    return values


def parse_value(text: str) -> Any:
    """A command-line value as TOML (``0.4``, ``true``, ``[1, 2]``, ``"a"``), else the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Set dotted keys: ``batch_size``, ``optimizer.lr``, ``mixup.alpha`` (= ``methods.mixup.alpha``)."""
    result = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in values.items()}
    result["methods"] = {k: dict(v) for k, v in result.get("methods", {}).items()}
    for key, value in overrides.items():
        parts = key.split(".")
        if len(parts) == 1:
            result[key] = value
        elif parts[0] in _TABLES and len(parts) == 2:
            result.setdefault(parts[0], {})[parts[1]] = value
        elif parts[0] == "methods" and len(parts) == 3:
            result["methods"].setdefault(parts[1], {})[parts[2]] = value
        elif len(parts) == 2:  # a method's hyperparameter: mixup.alpha
            result["methods"].setdefault(parts[0], {})[parts[1]] = value
        else:
            raise RecipeError(f"cannot apply --set {key}={value!r}: use `key`, `table.key` or `method.hyperparameter`")
    return result


def load_recipe(
    recipe: str | Path | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    methods: Sequence[str] = (),
    grid: Mapping[str, Any] | None = None,
    name: str = "cadence-bench-run",
    source: str | None = None,
) -> Recipe:
    """The one way to a validated recipe (``run``, ``grid`` and ``demo`` all come here).

    Args:
        recipe: a recipe file or the name of a shipped one, the values themselves (a dict), or None for a
            recipe made of the flags alone (its experiment is `name`).
        overrides: dotted keys set on top (``--set`` and the dedicated flags), see `apply_overrides`.
        methods: methods named on the command line: they run with the recipe's hyperparameters, else
            their defaults.
        grid: ``[grid]`` keys that replace the recipe's. Methods given here replace ``methods =
            "installed"``, so the recipe's ``exclude`` no longer applies.
        source: where the values came from (default: the file, or "command line").
    """
    if recipe is None:
        values, origin = {"name": name}, "command line"
    elif isinstance(recipe, Mapping):
        values, origin = dict(recipe), "values"
    else:
        path = resolve_recipe_path(recipe)
        values, origin = read_recipe_file(path), str(path)
    values = apply_overrides(values, overrides or {})
    if grid:
        values["grid"] = {**values.get("grid", DEFAULT_GRID), **grid}
        if "methods" in grid:
            values["grid"].pop("exclude", None)
    for method in methods:
        values["methods"].setdefault(method, {})
    return parse_recipe(values, source=source or origin)
