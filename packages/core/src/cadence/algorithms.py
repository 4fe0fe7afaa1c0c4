"""Every installed method's `Algorithm` class, e.g. ``cadence.algorithms.MixUp``.

Names resolve lazily through the ``cadence.methods`` entry points. Composer's module paths work
too: ``cadence.algorithms.<method>`` (``from cadence.algorithms.mixup import MixUp``) is the
method's package (``cadence_mixup``), found by a small import hook installed here, so switching
from Composer only changes the word ``composer`` to ``cadence``. Its submodules resolve to the
package's own (``cadence.algorithms.mixup.functional`` is ``cadence_mixup.functional``), never to
a second copy. Composer's inner modules (``composer.algorithms.mixup.mixup``) have no equivalent:
import from ``cadence.algorithms.mixup``, which exports the same names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from cadence.registry import lazy_lookup, registry

# A module with a (empty) __path__ may have submodules; the finder below is the only one that
# resolves them, since no directory is searched.
__path__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "__all__":  # computed: the classes of the methods installed now
        return sorted(registry().algorithms)
    if name.startswith("__"):
        raise AttributeError(name)
    if name in registry().methods:  # Composer's subpackage attribute: cadence.algorithms.mixup
        return importlib.import_module(f"{__name__}.{name}")
    return lazy_lookup("algorithms", name, __name__)


def __dir__() -> list[str]:
    return sorted(registry().algorithms)


def _method_module(fullname: str) -> ModuleType | None:
    """The module that ``cadence.algorithms.<method>[.<submodule>]`` names: the installed method's package
    (or its submodule), else None."""
    method, _, rest = fullname[len(__name__) + 1 :].partition(".")
    info = registry().methods.get(method)
    if info is None:
        return None
    if not rest:
        return info.module
    real = f"{info.module.__name__}.{rest}"
    return importlib.import_module(real) if importlib.util.find_spec(real) is not None else None


class _AliasLoader(importlib.abc.Loader):
    """Makes the imported name refer to the method's own package object (one module, two names)."""

    def __init__(self, module: ModuleType):
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return ModuleType(spec.name)  # a placeholder: exec_module swaps in the real package

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = self.module  # the import system returns what sys.modules holds


class _MethodFinder(importlib.abc.MetaPathFinder):
    """Resolves ``cadence.algorithms.<method>`` to the installed method package, Composer's module path."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        module = _method_module(fullname)
        if module is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=hasattr(module, "__path__"))


# First in line: the method packages' own __path__ would otherwise let the path finder load a
# second copy of their submodules under the alias name (two MixUp classes).
if not any(type(finder).__name__ == "_MethodFinder" for finder in sys.meta_path):
    sys.meta_path.insert(0, _MethodFinder())
