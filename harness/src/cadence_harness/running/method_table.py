"""A recipe's ``[methods]`` table: method names as the registry spells them, variants, and their instances.

A *variant* is a method at other hyperparameters, run as an arm of its own beside the method's plain arm:
``[methods."mixup@claimed"]`` with ``alpha = 1.0`` is MixUp at the claim's alpha, named ``mixup@claimed`` in
arms, run names and reports. A variant starts from the method's own table (``[methods.mixup]``) and
overrides what it sets; its label is part of the run's identity. This is how a study tests a method card's
claim at the hyperparameters the claim was made with while keeping its own settings (issue 26).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from cadence import Algorithm
from cadence.registry import MethodInfo, canonical_name, registry
from cadence_harness.records import base_method
from cadence_harness.running.recipe_checks import RecipeError, check_kwargs, fail

__all__ = ["base_method", "build_algorithm", "excluded_methods", "method_names", "method_table", "spelling"]

_LABEL = re.compile(r"[A-Za-z0-9_=-]+")


def _split(name: str) -> tuple[str, str]:
    base, _, label = name.partition("@")
    return base, label


def _method_info(name: Any) -> MethodInfo:
    """The registry entry of method `name` (any spelling: ``mixup``, ``MixUp``, ``mix-up``; a variant's method);
    errors suggest."""
    if not isinstance(name, str):
        raise fail("methods", name, "method names are strings, e.g. 'mixup'")
    base, label = _split(name)
    if "@" in name and not _LABEL.fullmatch(label):
        raise fail(f"methods.{name}", name, "a variant is named method@label, the label of letters, digits, _ = -")
    try:
        return registry().method(base)
    except KeyError as error:
        message = f"`methods.{name}`: {error.args[0]}"
        if "did you mean" not in message:  # no close match: it may just not be installed
            message += f"; a method package installs with `pip install -e packages/methods/{canonical_name(base)}`"
        raise RecipeError(message) from None


def _registered_name(name: str) -> str:
    """`name` as the registry spells its method, with its variant label kept (``MixUp@a`` -> ``mixup@a``)."""
    label = _split(name)[1]
    return _method_info(name).name + (f"@{label}" if label else "")


def method_names(names: Iterable[str], key: str = "methods") -> tuple[str, ...]:
    """Each name as the registry spells it (``MixUp`` -> ``mixup``), so one method is one arm, one hash. One arm
    holds one variant of a method at most: two would apply it twice."""
    names = list(names)
    resolved: dict[str, str] = {}
    for name in names:
        registered = _registered_name(name)
        method = base_method(registered)
        if method in {base_method(r) for r in resolved}:
            twice = next(given for r, given in resolved.items() if base_method(r) == method)
            raise fail(key, names, f"lists {method!r} twice (as {twice!r} and {name!r})")
        resolved[registered] = name
    return tuple(resolved)


def build_algorithm(name: str, kwargs: Mapping[str, Any]) -> Algorithm:
    """Construct the installed method `name` (or a variant's method) with `kwargs`; errors name `methods.<name>`."""
    info = _method_info(name)
    check_kwargs(f"methods.{name}", kwargs, info.algorithm)
    try:
        return info.algorithm(**kwargs)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"`methods.{name}` = {dict(kwargs)!r}: bad hyperparameters: {error}") from None


def method_table(table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``[methods.<name>]`` tables keyed by registry name; two spellings of one method merge, later keys win;
    a variant (``method@label``) starts from its method's table."""
    methods: dict[str, dict[str, Any]] = {}
    variants: dict[str, dict[str, Any]] = {}
    for name, kwargs in table.items():
        if not isinstance(kwargs, Mapping):
            raise fail(f"methods.{name}", kwargs, "must be a table of hyperparameters, e.g. {alpha = 0.2}")
        registered = _registered_name(str(name))
        (variants if "@" in registered else methods).setdefault(registered, {}).update(kwargs)
    for name, kwargs in variants.items():
        methods[name] = {**methods.get(base_method(name), {}), **kwargs}
    return methods


def spelling(name: Any) -> Any:
    """The registry's name of a method (a variant's label kept), or a normalised spelling when it is not
    installed."""
    try:
        return _registered_name(name)
    except (RecipeError, TypeError, AttributeError):
        return canonical_name(name) if isinstance(name, str) else name


def excluded_methods(names: Any) -> set[str]:
    """``grid.exclude`` as registry names; names of methods not installed here are fine (nothing to exclude)."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise fail("grid.exclude", names, "must be a list of method names")
    return {spelling(name) for name in names}
