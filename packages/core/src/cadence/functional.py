"""Every installed method's functions, e.g. ``cadence.functional.mixup_batch``.

Names resolve lazily through the ``cadence.methods`` entry points, so importing this
module costs nothing and only installed methods appear.
"""

from __future__ import annotations

from typing import Any

from cadence.registry import lazy_lookup, registry


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return lazy_lookup("functions", name, __name__)


def __dir__() -> list[str]:
    return sorted(registry().functions)
