"""Which arm of a study a method card's claim is judged on: the method alone, at the claim's hyperparameters.

A claim may state the settings it was made with (``settings: {alpha: 1.0}`` for MixUp's "alpha 1.0" claim).
It is then judged on the arm of the method alone whose every run used them, read from the runs' recorded
hyperparameters (``method.<name>.<key>``, else the method's recorded repr), which is usually a variant arm
such as ``mixup@claimed`` beside the study's own ``mixup`` arm. Without settings the claim is judged on the
plain arm (``mixup``). A study with no such arm cannot test the claim, and says which settings it ran.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from cadence_harness.reading.summaries import ArmSummary, Section
from cadence_harness.records import RunRecord

__all__ = ["claim_arm", "recorded_setting", "settings_text"]


def recorded_setting(record: RunRecord, method: str, key: str) -> str | None:
    """The value of `method`'s hyperparameter `key` in a run, as recorded (a string), or None if unrecorded."""
    given = record.params.get(f"method.{method}.{key}")
    if given is not None:
        return str(given)
    found = re.search(rf"[(,]\s*{re.escape(key)}=([^,()]+)", str(record.params.get(f"method.{method}", "")))
    return found.group(1).strip().strip("'\"") if found else None


def _same(recorded: str | None, wanted: Any) -> bool:
    if recorded is None:
        return False
    try:
        return float(recorded) == float(wanted)
    except (TypeError, ValueError):
        return recorded.lower() == str(wanted).lower()


def settings_text(settings: Iterable[tuple[str, Any]]) -> str:
    return ", ".join(f"{key}={value}" for key, value in settings)


def _runs(section: Section, arm: str) -> list[RunRecord]:
    return [r for r in section.records if r.arm == arm and not r.cycles]


def claim_arm(section: Section, method: str, settings: Sequence[tuple[str, Any]] = ()) -> tuple[list[ArmSummary], str]:
    """(the arm's rows budget by budget, "") for the arm the claim is judged on, or ([], why none fits)."""
    alone = [s for s in section.summaries if s.methods == [method] and not s.cyclic]
    arms = list(dict.fromkeys(s.arm for s in alone))
    if not arms:
        return [], f"`{section.name}` has no arm with {method} alone"
    if settings:
        fitting = [
            arm
            for arm in arms
            if all(_same(recorded_setting(r, method, k), v) for r in _runs(section, arm) for k, v in settings)
        ]
        if not fitting:
            ran = "; ".join(
                f"`{arm}`: "
                + ", ".join(f"{k}={recorded_setting(_runs(section, arm)[0], method, k)}" for k, _ in settings)
                for arm in arms
            )
            return [], f"no arm of {method} at the claim's settings ({settings_text(settings)}); the study ran {ran}"
        chosen = method if method in fitting else fitting[0]
    elif method in arms:
        chosen = method
    else:
        return [], f"`{section.name}` has {method} only as {', '.join(f'`{a}`' for a in arms)}, none plain"
    return [s for s in alone if s.arm == chosen], ""
