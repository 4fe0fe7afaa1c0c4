"""Discovery of installed methods through the entry-point group ``cadence.methods``.

A method package registers itself in exactly one place, its ``pyproject.toml``::

    [project.entry-points."cadence.methods"]
    mixup = "cadence_mixup:MixUp"

Installing a package makes its method discoverable, never active. The core never imports
a method by name: `cadence.functional` and `cadence.algorithms` are built from this index.
The entry-point machinery (discovery, names claimed twice, the error a missing name raises) is
`cadence._plugins`, which the log destinations' group ``cadence.loggers`` shares.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import EntryPoint
from types import ModuleType
from typing import Any

from cadence._plugins import PluginWarning, RegistryError, discover, distribution_name, load_class, raise_missing
from cadence.algorithm import Algorithm

__all__ = [
    "ENTRY_POINT_GROUP",
    "MethodInfo",
    "PluginWarning",
    "Registry",
    "RegistryError",
    "canonical_name",
    "registry",
]

ENTRY_POINT_GROUP = "cadence.methods"


@dataclass(frozen=True)
class MethodInfo:
    name: str  # registry name, e.g. "mixup"
    algorithm: type[Algorithm]
    module: ModuleType  # the package, e.g. cadence_mixup
    distribution: str  # e.g. "cadence-mixup"


@dataclass
class Registry:
    methods: dict[str, MethodInfo] = field(default_factory=dict)
    functions: dict[str, Any] = field(default_factory=dict)  # public non-Algorithm names
    algorithms: dict[str, type[Algorithm]] = field(default_factory=dict)  # class name -> class
    broken: dict[str, str] = field(default_factory=dict)  # entry-point name -> reason

    def method(self, name: str) -> MethodInfo:
        """The method registered as `name`, or whose class is named `name` (``mixup``, ``MixUp``, ``Mix-Up``)."""
        key = canonical_name(name)
        if key in self.methods:
            return self.methods[key]
        by_class = {canonical_name(info.algorithm.__name__): info for info in self.methods.values()}
        if key.replace("_", "") in by_class:
            return by_class[key.replace("_", "")]
        raise KeyError(f"no installed method named {name!r}{self.suggest(name)}")

    def suggest(self, name: str) -> str:
        """ "; did you mean 'mixup'?" (or the installed list), and the packages that failed to load."""
        names = sorted(self.methods)
        spellings = {canonical_name(n): n for n in names} | {
            canonical_name(info.algorithm.__name__): n for n, info in self.methods.items()
        }
        close = difflib.get_close_matches(canonical_name(name), list(spellings), n=1, cutoff=0.6)
        hint = f"; did you mean {spellings[close[0]]!r}?" if close else ";"
        hint += f" Installed: {', '.join(names) or 'none (install a cadence-<method> package)'}"
        if self.broken:
            hint += f"; could not load: {', '.join(f'{n} ({r})' for n, r in self.broken.items())}"
        return hint


def canonical_name(name: str) -> str:
    """The registry spelling of a method name: lower case, dashes and spaces as underscores."""
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


def _load(entry_point: EntryPoint) -> tuple[type[Algorithm], ModuleType]:
    algorithm = load_class(entry_point, Algorithm)
    module = importlib.import_module(entry_point.module)
    return algorithm, module


def _public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        raise TypeError(f"{module.__name__} must define __all__ listing its public names")
    return list(names)


def build_registry() -> Registry:
    """Load every installed method package. Broken packages are reported, not fatal."""
    found = discover(ENTRY_POINT_GROUP, "method")
    registry = Registry()
    owners: dict[str, str] = {}
    for name in sorted(found):
        entry_point = found[name]
        try:
            algorithm, module = _load(entry_point)
            public = {n: getattr(module, n) for n in _public_names(module)}
        except Exception as error:  # a broken plugin must not take the others down
            reason = f"{type(error).__name__}: {error}"
            registry.broken[name] = reason
            warnings.warn(
                f"cadence could not load method {name!r} from {entry_point.value}: {reason}",
                PluginWarning,
                stacklevel=2,
            )
            continue
        registry.methods[name] = MethodInfo(name, algorithm, module, distribution_name(entry_point))
        for public_name, obj in public.items():
            if public_name in owners and owners[public_name] != name:
                raise RegistryError(
                    f"{public_name!r} is exported by two methods, {owners[public_name]!r} and {name!r}; "
                    "rename one of them"
                )
            owners[public_name] = name
            if inspect.isclass(obj) and issubclass(obj, Algorithm):
                registry.algorithms[public_name] = obj
            else:
                registry.functions[public_name] = obj
    return registry


@lru_cache(maxsize=1)
def registry() -> Registry:
    """The registry of installed methods, built on first use."""
    return build_registry()


def lazy_lookup(kind: str, name: str, module_name: str) -> Any:
    """``cadence.algorithms.<name>`` / ``cadence.functional.<name>`` from the installed methods.

    A missing name raises AttributeError (so ``hasattr`` works), except under
    ``from cadence.algorithms import Name``, where Python would replace that message by a bare
    "cannot import name": there it raises ImportError with the same explanation.
    """
    table = registry().algorithms if kind == "algorithms" else registry().functions
    if name in table:
        return table[name]
    broken = registry().broken
    close = difflib.get_close_matches(name, list(table), n=1)
    message = f"module {module_name!r} has no attribute {name!r}: no installed cadence method provides it. "
    if close:
        message += f"Did you mean {close[0]!r}? "
    else:
        message += "If it is a cadence method, install its package (cadence-<method>, e.g. pip install cadence-mixup). "
    if broken:
        message += f"Packages that failed to load: {', '.join(f'{n} ({r})' for n, r in broken.items())}. "
    message += f"Available: {', '.join(sorted(table)) or 'none (install a cadence-<method> package)'}"
    raise_missing(message, module_name)
