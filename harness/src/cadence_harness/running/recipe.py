"""Recipes: small TOML (or YAML) files that say what to train and which methods to compare.

Everything is checked before anything runs, and every error names the bad key and echoes
its value. A recipe looks like::

    name = "fashion_mnist_resnet20"     # also the MLflow experiment
    model = "tv/resnet20"
    data = "fashion_mnist"
    duration = "10ep"                   # or a sweep of budgets: durations = ["2ep", "4ep", "8ep"]
    # curve = "cyclic"                  # with durations: one run per arm and seed (see `budgets`)
    batch_size = 128
    seeds = 3
    target_accuracy = 0.90

    [optimizer]
    name = "sgd"
    lr = 0.1

    [schedule]                          # with durations, every time is a fraction of the run
    name = "cosine_warmup"
    t_warmup = "0.1dur"

    [methods.mixup]                     # hyperparameters of each method the grid uses
    alpha = 0.2

    [grid]
    arms = ["baseline", "each"]         # baseline, each, leave_one_out, pairs, all
    combinations = [["mixup", "label_smoothing"]]
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cadence import Algorithm
from cadence.registry import registry
from cadence.time import TimeUnit
from cadence_harness.running.method_table import (
    base_method,
    build_algorithm,
    excluded_methods,
    method_names,
    method_table,
    spelling,
)
from cadence_harness.running.optimizer import check_harness_keys
from cadence_harness.running.recipe_checks import (
    OPTIMIZERS,
    SCHEDULES,
    TABLES,
    RecipeError,
    check_budgets,
    check_choice,
    check_dataset,
    check_decays,
    check_optimizer,
    check_schedule,
    check_time,
    check_types,
    did_you_mean,
    fail,
    normalise_seeds,
    resolved_precision,
    unknown_key,
)
from cadence_harness.running.scale_out import check_scale_out

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
    "shipped_recipes",
]

RECIPES_DIR = Path(__file__).resolve().parents[3] / "recipes"
ARMS = ("baseline", "each", "leave_one_out", "pairs", "all")
DEFAULT_GRID: dict[str, Any] = {"arms": ["baseline", "each"]}


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
    durations: tuple[str, ...] = ()  # a sweep of budgets (see `budgets`); `duration` is the last of them
    curve: str = "sweep"  # or "cyclic": one run per arm and seed, its cycles ending at the budgets
    description: str = ""
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    subset: int | None = None
    eval_subset: int | None = None
    max_length: int = 64  # text: tokens per sample (classification) or per packed block (causal_lm)
    task: str = "classification"  # or "causal_lm": a text dataset's text as a language-modelling corpus
    loader: str = "tensor"
    augment: str = "none"
    num_workers: int = 0
    eval_batch_size: int | None = None
    eval_interval: str = "1ep"
    device: str = "cpu"
    precision: str | None = None
    channels_last: bool = False
    compile: bool | str = False  # or a torch.compile mode, e.g. "reduce-overhead" (CUDA graphs)
    warmup_batches: int = 0
    device_train_microbatch_size: int | None = None  # per process
    nproc: int = 1  # processes (torchrun) that train each run: see `scale_out`
    fsdp: dict[str, Any] | None = None  # FSDP2's options (Trainer's parallelism_config["fsdp"]); None: DDP
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
        data["durations"] = list(self.durations)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipe:
        """The recipe `to_dict` wrote, as it was validated (nothing is checked or built again)."""
        return cls(**{**data, "seeds": tuple(data["seeds"]), "durations": tuple(data.get("durations", ()))})

    def algorithm(self, name: str) -> Algorithm:
        """The instance of method `name` that validation built, for questions about the method (its repr,
        whether it applies to a model and batch). It never trains: every run builds its own."""
        if name not in self._algorithms:  # a recipe that was not validated in this process
            self._algorithms[name] = build_algorithm(name, self.methods.get(name, {}))
        return self._algorithms[name]

    @property
    def resolved_precision(self) -> str:
        return resolved_precision(self.precision, self.device)

    @property
    def grid_methods(self) -> list[str]:
        return list(self.grid.get("methods", list(self.methods)))


_FIELDS = {f.name: f for f in fields(Recipe) if f.init}


def _resolve_grid(grid: Mapping[str, Any], variants: Sequence[str] = ()) -> dict[str, Any]:
    """Check the grid; method names become registry names, ``methods = "installed"`` every installed one not in
    ``exclude`` and the recipe's `variants` of those."""
    known = ["arms", "methods", "combinations", "exclude"]
    for key in grid:
        if key not in known:
            raise unknown_key(f"grid.{key}", known, "grid")
    resolved = dict(grid)
    given_exclude = resolved.pop("exclude", [])
    exclude = excluded_methods(given_exclude)
    arms = resolved.get("arms", [])
    if not isinstance(arms, list):
        raise fail("grid.arms", arms, f"must be a list of {', '.join(ARMS)}")
    for arm in arms:
        check_choice("grid.arms", arm, ARMS)
    names = resolved.get("methods")
    if names == "installed":
        installed = [name for name in sorted(registry().methods) if name not in exclude]
        resolved["methods"] = installed + [v for v in variants if base_method(v) in installed and v not in exclude]
    elif exclude:
        raise fail("grid.exclude", given_exclude, 'only applies with methods = "installed"')
    elif names is not None:
        if not isinstance(names, list):
            raise fail("grid.methods", names, 'must be a list of method names, or "installed"')
        resolved["methods"] = list(method_names(names, "grid.methods"))
    combos = resolved.get("combinations", [])
    if not isinstance(combos, list) or not all(isinstance(c, list) for c in combos):
        raise fail("grid.combinations", combos, 'must be a list of lists of method names, e.g. [["mixup", "cutout"]]')
    if combos:
        resolved["combinations"] = [list(method_names(combo, "grid.combinations")) for combo in combos]
    return resolved


def parse_recipe(values: Mapping[str, Any], source: str = "") -> Recipe:
    """Validate a recipe given as a dict (a parsed TOML/YAML file, after overrides)."""
    from cadence_harness.running.models import check_model

    for key in values:
        if key not in _FIELDS or key == "source":
            raise unknown_key(key, [k for k in _FIELDS if k != "source"], values=values)
    values = dict(values)
    durations = check_budgets(values)  # a sweep also sets `duration` (its longest budget)
    check_types(values)
    check_scale_out(values)
    check_time("duration", values["duration"], (TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE))
    check_time("eval_interval", values.get("eval_interval", "1ep"), (TimeUnit.EPOCH, TimeUnit.BATCH))
    try:
        check_model(values["model"], values["data"], values.get("task", "classification"))
        check_dataset(values["data"])
    except ValueError as error:
        raise RecipeError(str(error)) from None
    methods = method_table(values.get("methods", {}))
    optimizer = {"name": "sgd", "lr": 0.1, **dict(values.get("optimizer", {}))}
    check_optimizer(optimizer)
    check_harness_keys(optimizer)
    schedule = {"name": "constant", **dict(values.get("schedule", {}))}
    check_schedule(schedule)
    if durations:
        check_decays(schedule)
    grid = _resolve_grid(values.get("grid", DEFAULT_GRID), [name for name in methods if "@" in name])
    used = [*methods, *grid.get("methods", []), *(name for combo in grid.get("combinations", []) for name in combo)]
    algorithms = {name: build_algorithm(name, methods.get(name, {})) for name in dict.fromkeys(used)}  # once each
    tables = ("methods", "optimizer", "schedule", "grid", "seeds", "durations")
    kwargs = {k: v for k, v in values.items() if k not in tables}
    kwargs["model_kwargs"] = dict(values.get("model_kwargs", {}))
    recipe = Recipe(
        **kwargs,
        seeds=normalise_seeds(values.get("seeds", [0])),
        durations=durations,
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
    shipped = shipped_recipes()
    raise RecipeError(
        f"recipe {str(name_or_path)!r} is not a file nor a shipped recipe; {did_you_mean(str(name_or_path), shipped)}"
        f"shipped: {', '.join(shipped) or 'none'}"
    )


def shipped_recipes() -> list[str]:
    """The names of the shipped recipes (``harness/recipes/*.toml``): what ``cadence-bench grid NAME`` takes, so
    what a misspelled name is matched against, and what a refusal may name as the grid that writes its records."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))


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
    """Set dotted keys: ``batch_size``, ``optimizer.lr``, ``mixup.alpha`` (= ``methods.mixup.alpha``).

    ``duration`` (one budget) and ``durations`` (a sweep) replace each other.
    """
    result = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in values.items()}
    for key, other in (("duration", "durations"), ("durations", "duration")):
        if key in overrides and other not in overrides:
            result.pop(other, None)
    result["methods"] = {k: dict(v) for k, v in result.get("methods", {}).items()}
    for key, value in overrides.items():
        parts = key.split(".")
        if len(parts) == 1:
            result[key] = value
        elif parts[0] in TABLES and len(parts) == 2:
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
            "installed"``, so the recipe's ``exclude`` no longer applies, and the recipe's combinations
            that use other methods are dropped.
        source: where the values came from (default: the file, or "command line").
    """
    values: dict[str, Any]  # a recipe's TOML values
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
            if "combinations" not in grid:  # the recipe's combinations of methods outside them do not run
                chosen = {spelling(m) for m in grid["methods"]}
                combos = values["grid"].get("combinations", [])
                values["grid"]["combinations"] = [c for c in combos if {spelling(m) for m in c} <= chosen]
    for method in methods:
        values["methods"].setdefault(method, {})
    return parse_recipe(values, source=source or origin)
