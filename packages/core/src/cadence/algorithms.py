"""Every installed method's `Algorithm` class, e.g. ``cadence.algorithms.MixUp``.

Names resolve lazily through the ``cadence.methods`` entry points.
"""

from __future__ import annotations

from typing import Any

from cadence.registry import lazy_lookup, registry


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return lazy_lookup("algorithms", name, __name__)


def __dir__() -> list[str]:
    return sorted(registry().algorithms)
