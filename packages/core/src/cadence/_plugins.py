"""Entry-point plugins: what the method registry and the loggers share.

A package extends cadence by declaring an entry point in its ``pyproject.toml``, never by being
named in the core: methods in the group ``cadence.methods`` (`cadence.registry`), log destinations
in ``cadence.loggers``::

    [project.entry-points."cadence.loggers"]
    MLFlowLogger = "cadence_mlflow:MLFlowLogger"

This module finds a group's entry points (a name claimed by two packages is an error), loads one
and checks its type, and raises the error a missing name deserves. It imports nothing of cadence,
so every module may use it without an import circle.
"""

from __future__ import annotations

import difflib
import dis
import inspect
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from types import FrameType
from typing import NoReturn

__all__ = ["PluginWarning", "RegistryError", "discover", "distribution_name", "load_class", "lookup", "raise_missing"]


class RegistryError(RuntimeError):
    """Two installed packages claim the same name."""


class PluginWarning(UserWarning):
    """An installed plugin package could not be loaded; the others still work."""


def distribution_name(entry_point: EntryPoint) -> str:
    """The distribution that declares `entry_point` (``cadence-mlflow``), or ``?``."""
    dist = getattr(entry_point, "dist", None)
    return dist.name if dist is not None else "?"


def discover(group: str, kind: str) -> dict[str, EntryPoint]:
    """The entry points of `group` by name. `kind` names what they are in the error (``method``, ``logger``)."""
    found: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=group):
        previous = found.get(entry_point.name)
        if previous is not None and previous.value != entry_point.value:
            raise RegistryError(
                f"{kind} name {entry_point.name!r} is registered twice: {previous.value} "
                f"({distribution_name(previous)}) and {entry_point.value} ({distribution_name(entry_point)}); "
                "uninstall one of the two packages"
            )
        found[entry_point.name] = entry_point
    return found


def load_class(entry_point: EntryPoint, base: type) -> type:
    """The class `entry_point` names, which must subclass `base`."""
    loaded = entry_point.load()
    if not (inspect.isclass(loaded) and issubclass(loaded, base)):
        raise TypeError(f"{entry_point.value} is not a cadence.{base.__name__} subclass")
    return loaded


def lookup(
    group: str, kind: str, name: str, module_name: str, base: type, available: Iterable[str], homes: Mapping[str, str]
) -> type:
    """``<module_name>.<name>`` from the plugins of `group`: the class its entry point names.

    `kind` is what they are (``logger``); `available` are the names the module has without plugins (for
    suggestions); `homes` maps a name a known package provides to that package, so its absence is explained
    with the command that installs it. A plugin that is installed but fails to load raises ImportError with the reason.
    """
    found = discover(group, kind)
    if name in found:
        entry_point = found[name]
        try:
            return load_class(entry_point, base)
        except Exception as error:
            raise ImportError(
                f"{module_name}.{name} is registered by {distribution_name(entry_point)} ({entry_point.value}) "
                f"but could not be loaded: {type(error).__name__}: {error}",
                name=module_name,
            ) from error
    message = f"module {module_name!r} has no attribute {name!r}"
    if name in homes:
        raise_missing(
            f"{message}: {name} lives in the package {homes[name]}, which is not installed: pip install {homes[name]}",
            module_name,
        )
    names = sorted({*available, *found})
    close = difflib.get_close_matches(name, names, n=1)
    message += f"; did you mean {close[0]!r}?" if close else "."
    message += f" Available: {', '.join(names)}. A package adds one through the entry-point group {group!r}"
    installable = {n: p for n, p in homes.items() if n not in found}
    if installable:
        message += f" (not installed: {', '.join(f'{n} from {p}' for n, p in sorted(installable.items()))})"
    raise_missing(message, module_name)


def raise_missing(message: str, module_name: str) -> NoReturn:
    """AttributeError(message) (so ``hasattr`` works), but ImportError under ``from module import name``,
    where Python would replace an AttributeError's message by a bare "cannot import name"."""
    if _called_by_from_import():
        raise ImportError(message, name=module_name)
    raise AttributeError(message)


_IMPORT_FROM = dis.opmap.get("IMPORT_FROM")


def _called_by_from_import() -> bool:
    """True when the code that asked the module's ``__getattr__`` is executing ``from module import name``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "__getattr__":
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None or _IMPORT_FROM is None:
        return False
    code = caller.f_code.co_code
    return 0 <= caller.f_lasti < len(code) and code[caller.f_lasti] == _IMPORT_FROM
