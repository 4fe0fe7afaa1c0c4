"""Refusals before anything trains: this machine, and whether each method can work on the model and data.

Each raises with one line that names what does not fit and the fix; the command line prints it
and exits with code 2. Recipe values are checked earlier, by `cadence_harness.running.recipe`.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from cadence import Algorithm, MethodConflictError, NotApplicableError
from cadence.batch import batch_to_device
from cadence.engine import check_composition
from cadence.ops import NoEffectError, NoEffectWarning, SurgeryMethod
from cadence_harness.running.recipe_checks import RecipeError

__all__ = ["check_applicable", "check_arm_composition", "require_device", "sample_batch"]


def require_device(device: str) -> torch.device:
    """The torch device of a recipe's ``device``; ``gpu`` without CUDA is refused."""
    if device == "gpu":
        if not torch.cuda.is_available():
            raise RecipeError(
                "CUDA is not available on this machine; use --device cpu (or run on a machine with a CUDA GPU, "
                f"where torch.cuda.is_available() is True; this torch is {torch.__version__})"
            )
        return torch.device("cuda")
    return torch.device("cpu")


def sample_batch(train: Iterable[Any], evaluate: Iterable[Any], device: torch.device) -> Any:
    """A batch as the Trainer hands them to the methods, on `device`, drawn without disturbing training.

    The first training batch when the loader can show it without advancing (`TensorLoader.peek`),
    else the first evaluation batch (same structure, dtypes and keys; no randomness, no workers).
    """
    peek = getattr(train, "peek", None)
    return batch_to_device(peek() if peek is not None else next(iter(evaluate)), device)


def check_applicable(
    methods: Iterable[tuple[str, Algorithm]],
    model: Any,
    batch: Any,
    arms: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Ask each ``(name, method)`` whether it works on `model` with batches like `batch`.

    Raises the first refusal: the method's own `NotApplicableError` (it names the method, what does
    not fit and the fix), followed by the grid arms that use the method when `arms` is given. A surgery
    method is also tried on a copy of the model: one that would change no module is refused, since its
    run would be the baseline's under the method's name (a measured arm in every table).
    """
    for name, algorithm in methods:
        try:
            algorithm.check_applicable(model, batch)
            if isinstance(algorithm, SurgeryMethod):
                _check_surgery_changes_something(name, algorithm, model)
        except NotApplicableError as error:
            if arms is None or not arms.get(name):
                raise
            raise NotApplicableError(f"{error} (in the grid's arms {', '.join(arms[name])})") from None


def check_arm_composition(arm: Sequence[str], algorithms: Sequence[Algorithm]) -> None:
    """The methods of one arm can run together (the engine's own check, before any run exists)."""
    try:
        check_composition(list(algorithms))
    except MethodConflictError as error:
        raise RecipeError(f"the arm {'+'.join(arm)}: {error}") from None


def _check_surgery_changes_something(name: str, algorithm: SurgeryMethod, model: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoEffectWarning)
        try:
            algorithm.surgery(copy.deepcopy(model), [])
        except (NoEffectWarning, NoEffectError) as nothing:
            raise NotApplicableError(
                f"{name} would change nothing in this model ({nothing}), so its run would be the baseline under "
                f"another name; leave {name} out of the arms for this model"
            ) from None
