"""A grid that would mix environments in one study's records says so before it runs."""

from __future__ import annotations

from pathlib import Path

from cadence_harness.records import TAG, RunRecord, append_records
from cadence_harness.running.environment_check import mismatch

EPYC = {"device_name": "AMD EPYC", "versions.torch": "2.15.0", "versions.transformers": "5.23.0", "versions.timm": "1"}


def _record(seed: int, env: dict[str, str]) -> RunRecord:
    return RunRecord(
        run_id=f"r{seed}",
        experiment="study",
        tags={f"{TAG}arm": "baseline", f"{TAG}seed": str(seed), f"{TAG}config_hash": f"h{seed}"},
        params={"duration": "2ep", **env},
        metrics={"final/accuracy": 0.5},
    )


def test_new_runs_beside_records_of_another_environment_are_announced(tmp_path: Path) -> None:
    records = tmp_path / "study.jsonl"
    xeon = {**EPYC, "device_name": "Intel Xeon", "versions.torch": "2.14.1"}
    append_records(records, [_record(0, EPYC), _record(1, EPYC), _record(2, xeon)])
    warning = mismatch(records, xeon, planned=["h3", "h4"])
    assert warning is not None and warning.startswith(f"warning: 2 of the 3 runs recorded in {records} ran with ")
    assert "ran with device_name AMD EPYC, torch 2.15.0, transformers 5.23.0, timm 1;" in warning
    assert "this machine has device_name Intel Xeon, torch 2.14.1." in warning  # only what differs
    assert "The 2 new runs will be compared with them" in warning
    assert mismatch(records, EPYC, planned=["h3"]) is None  # the same environment
    assert mismatch(records, xeon, planned=[]) is None  # nothing to run: nothing mixed
    assert mismatch(tmp_path / "none.jsonl", xeon, planned=["h3"]) is None  # no records yet
