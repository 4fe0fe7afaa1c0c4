"""Whether new runs of a study would be compared with records made on another machine or software.

A study's runs are compared with each other (speedups, claims, the timing null), so they must come from one
environment: across torch or transformers versions even the counted FLOPs can differ (BERT-Tiny counted
3.6e9 FLOPs per batch under torch 2.14.1 / transformers 5.24 against 7.3e9 under torch 2.15.0 / transformers
5.23), and times differ across machines. A grid that adds runs to such records says so before it starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from cadence_harness.records import read_records

__all__ = ["KEYS", "mismatch"]

KEYS = ("device_name", "versions.torch", "versions.transformers", "versions.timm")  # what makes runs comparable


def _describe(values: Mapping[str, str]) -> str:
    return ", ".join(f"{key.removeprefix('versions.')} {value}" for key, value in values.items())


def mismatch(records: Path, here: Mapping[str, str], planned: Sequence[str] = ()) -> str | None:
    """A warning when the recorded runs' environment (the most common one) differs from `here` in `KEYS`, else None.

    `planned`: the configuration hashes about to run; without any, nothing would be mixed and there is no warning.
    """
    if not planned or not records.is_file():
        return None
    recorded = read_records([records])
    if not recorded:
        return None
    seen = Counter(tuple((key, r.params.get(key, "?")) for key in KEYS) for r in recorded)
    common, count = seen.most_common(1)[0]
    theirs = dict(common)
    differing = {key: here.get(key, "?") for key in KEYS if here.get(key, "?") != theirs[key]}
    if not differing:
        return None
    return (
        f"warning: {count} of the {len(recorded)} runs recorded in {records} ran with {_describe(theirs)}; this "
        f"machine has {_describe(differing)}. The {len(planned)} new runs will be compared with them, and FLOPs "
        "counts can differ across versions; times are compared only between runs of one machine (device_name), "
        "so the new runs get no time speedups against the recorded ones. Run the study in one environment, or "
        "keep these runs apart (--records another folder)."
    )
