"""`RunSpec`: one run of a grid (a recipe, one arm of methods, one seed) and its stable identity.

A run is identified by the hash of its canonical configuration (what is trained, how, with
which methods and hyperparameters, on which seed), stored as the MLflow tag
``cadence.config_hash``. A grid skips every configuration whose hash already has a
finished run, so reruns resume; ``cadence.group_hash`` (the same without the seed) groups
the seeds of one arm in reports. Hashes without the budget tie the runs of one tradeoff curve
together (``cadence.curve_hash``), and without the methods too, the arms of one study
(``cadence.family_hash``): a report compares only runs of one family.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cadence_harness.records import TAG
from cadence_harness.running.method_table import base_method
from cadence_harness.running.recipe import Recipe
from cadence_harness.running.scale_out import identity

__all__ = ["RunSpec", "arm_name", "config_hash"]

_NOT_IDENTITY = ("name", "description", "source", "seeds", "grid", "methods", "durations", "curve")


#: Methods that do the weight decay themselves: their arms build the recipe's optimizer without its own.
DECAY_OWNERS = frozenset({"decoupled_weight_decay"})


def arm_name(methods: tuple[str, ...]) -> str:
    return "+".join(methods) if methods else "baseline"


def config_hash(config: dict[str, Any]) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunSpec:
    recipe: Recipe
    arm: tuple[str, ...]
    seed: int
    label: str = ""  # which run of a curve: its budget, or "cyclic" (not part of its identity)

    @property
    def arm_name(self) -> str:
        return arm_name(self.arm)

    @property
    def run_name(self) -> str:
        return f"{self.arm_name}-{self.label}-s{self.seed}" if self.label else f"{self.arm_name}-s{self.seed}"

    @property
    def experiment(self) -> str:
        return self.recipe.name

    def method_kwargs(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, dict(self.recipe.methods.get(name, {}))) for name in self.arm]

    def optimizer_settings(self) -> dict[str, Any]:
        """The recipe's optimizer as this arm builds it: without weight decay of its own when one of the arm's
        methods takes the decay over (`DECAY_OWNERS`), so that the arm swaps coupled decay for decoupled
        decay instead of decaying twice (DecoupledWeightDecay refuses an optimizer that decays)."""
        settings = dict(self.recipe.optimizer)
        if DECAY_OWNERS.intersection(base_method(name) for name in self.arm) and settings.get("weight_decay"):
            settings["weight_decay"] = 0.0
        return settings

    def group_config(self) -> dict[str, Any]:
        """Everything that defines the arm, except the seed (``nproc`` and ``fsdp`` only when set: `scale_out`)."""
        config = identity({k: v for k, v in self.recipe.to_dict().items() if k not in _NOT_IDENTITY})
        config["precision"] = self.recipe.resolved_precision
        config["methods"] = [{"name": name, **kwargs} for name, kwargs in self.method_kwargs()]
        return config

    def config(self) -> dict[str, Any]:
        return {**self.group_config(), "seed": self.seed}

    @property
    def config_hash(self) -> str:
        return config_hash(self.config())

    @property
    def group_hash(self) -> str:
        return config_hash(self.group_config())

    @property
    def baseline_hash(self) -> str:
        """The group hash of the same configuration without methods: the arm's baseline."""
        return config_hash({**self.group_config(), "methods": []})

    def curve_config(self) -> dict[str, Any]:
        """The arm's configuration without its budget: every budget of one tradeoff curve shares it."""
        return {k: v for k, v in self.group_config().items() if k != "duration"}

    @property
    def curve_hash(self) -> str:
        return config_hash(self.curve_config())

    @property
    def baseline_curve_hash(self) -> str:
        return config_hash({**self.curve_config(), "methods": []})

    @property
    def family_hash(self) -> str:
        """Everything but the methods, the budget and the cyclic schedule: the runs a report may compare."""
        config = {**self.curve_config(), "methods": []}
        config["schedule"] = {k: v for k, v in config["schedule"].items() if k != "cycles"}
        return config_hash(config)

    @property
    def cycles(self) -> tuple[str, ...]:
        return tuple(self.recipe.schedule.get("cycles", ()))

    def tags(self) -> dict[str, str]:
        return {
            f"{TAG}config_hash": self.config_hash,
            f"{TAG}group_hash": self.group_hash,
            f"{TAG}baseline_hash": self.baseline_hash,
            f"{TAG}recipe": self.recipe.name,
            f"{TAG}arm": self.arm_name,
            f"{TAG}seed": str(self.seed),
            f"{TAG}curve_hash": self.curve_hash,
            f"{TAG}baseline_curve_hash": self.baseline_curve_hash,
            f"{TAG}family_hash": self.family_hash,
            f"{TAG}budget": self.recipe.duration,
            f"{TAG}curve": "cyclic" if self.cycles else "sweep",
            **({f"{TAG}cycles": ",".join(self.cycles)} if self.cycles else {}),
        }

    # Handing a spec to a worker process -------------------------------------------------
    def to_json(self) -> str:
        data = {"recipe": self.recipe.to_dict(), "arm": list(self.arm), "seed": self.seed, "label": self.label}
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec `to_json` wrote, as the parent validated it: nothing is validated or built again."""
        data = json.loads(text)
        recipe = Recipe.from_dict(data["recipe"])
        return cls(recipe=recipe, arm=tuple(data["arm"]), seed=int(data["seed"]), label=data.get("label", ""))
