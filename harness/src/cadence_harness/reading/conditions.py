"""The conditions a claim was made under, against what a study is: when a claim is *not testable here*.

A card's claim states them (`conditions` in its front matter); each is compared with what the study's run
records say (their params and evals), so the reading side needs no recipe:

* ``device``: the device the claim needs (``cuda``: a GPU; a CPU study cannot test it). The harness records a
  GPU run's device as ``gpu``; a claim may say ``cuda`` (Composer's word) or ``gpu``, and either matches it;
* ``precision``: the precision it needs, as a prefix of the study's (``amp``: any autocast);
* ``data``: the data set(s) it was made on and is specific to (a name or a list);
* ``min_steps``: the optimizer steps it needs (a regulariser's effect on generalisation shows only
  once a model trains long enough to overfit); the study's longest run must reach them;
* ``baseline_without``: what the baseline must not already do, as names of training algorithms (a name or
  a list; ``Lookahead`` for a weight-averaging claim): a method's gain over a baseline that already has
  its effect is not its claim. Read from the baseline runs' ``algorithms`` param.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cadence_harness.reading.summaries import Section
from cadence_harness.records import RunRecord

__all__ = ["CONDITIONS", "parse_conditions", "study_conditions", "unmet"]

CONDITIONS = ("device", "precision", "data", "min_steps", "baseline_without")


def parse_conditions(value: Any, where: str) -> tuple[tuple[str, Any], ...]:
    """A claim's `conditions` mapping, checked, as ``(key, value)`` pairs in the order of `CONDITIONS`."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.conditions must be a mapping like {{device: cuda, min_steps: 10000}}")
    unknown = sorted(set(value) - set(CONDITIONS))
    if unknown:
        raise ValueError(f"{where}.conditions has unknown keys {unknown}; use {list(CONDITIONS)}")
    if "min_steps" in value and (isinstance(value["min_steps"], bool) or not isinstance(value["min_steps"], int)):
        raise ValueError(f"{where}.conditions.min_steps={value['min_steps']!r} must be a whole number of steps")
    return tuple((key, value[key]) for key in CONDITIONS if key in value)


_DEVICE_SPELLINGS = {"cuda": ("cuda", "gpu"), "gpu": ("gpu", "cuda")}  # one device, two words


def _ran_on(device: Any, wanted: Any) -> bool:
    """The study's `device` (a recorded param: ``cpu``, ``gpu``, ``cuda:1``) is the claim's `wanted` one."""
    return str(device).startswith(_DEVICE_SPELLINGS.get(str(wanted), (str(wanted),)))


def _steps(record: RunRecord) -> int:
    return max((int(e.get("step", 0)) for e in record.evals), default=0)


def study_conditions(section: Section) -> dict[str, Any]:
    """What the section's runs are, in the terms of `CONDITIONS`: the devices, precisions and data sets they ran
    on (sets), and the optimizer steps of its longest run."""
    records = section.records
    return {
        "device": {r.params.get("device", "") for r in records},
        "precision": {r.params.get("precision", "") for r in records},
        "data": {r.params.get("data", "") for r in records},
        "min_steps": max((_steps(r) for r in records), default=0),
        "baseline_algorithms": {r.params.get("algorithms", "") for r in records if r.arm == "baseline"},
    }


def _named(values: set[str], what: str) -> str:
    """The study's values of a setting, or that its records do not name one (then a condition on it is unmet)."""
    named = sorted(v for v in values if v)
    return ", ".join(named) if named else f"(its records name no {what})"


def unmet(conditions: Sequence[tuple[str, Any]], study: Mapping[str, Any]) -> list[str]:
    """The conditions (`parse_conditions`) the study (`study_conditions`) does not meet, each saying both sides."""
    unmet = []
    for key, wanted in conditions:
        if key == "min_steps" and study["min_steps"] < int(wanted):
            unmet.append(f"needs >= {int(wanted):,} optimizer steps; the longest run here has {study['min_steps']:,}")
        elif key == "device" and not all(_ran_on(d, wanted) for d in study["device"]):
            unmet.append(f"made on {wanted}; this study ran on {_named(study['device'], 'device')}")
        elif key == "precision" and not all(str(p).startswith(str(wanted)) for p in study["precision"]):
            unmet.append(f"needs {wanted} precision; this study ran in {_named(study['precision'], 'precision')}")
        elif key == "data":
            names = [wanted] if isinstance(wanted, str) else list(wanted)
            if not study["data"] <= {str(n) for n in names}:
                unmet.append(f"made on {'/'.join(map(str, names))}; this study used {', '.join(sorted(study['data']))}")
        elif key == "baseline_without":
            names = [wanted] if isinstance(wanted, str) else list(wanted)
            ran = sorted(a for a in study.get("baseline_algorithms", ()) if any(f"{n}(" in a for n in names))
            if ran:
                unmet.append(f"made against a baseline without {'/'.join(names)}; this study's baseline runs {ran[0]}")
    return unmet
