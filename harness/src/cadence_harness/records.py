"""Run records: a finished run as one line of JSON, the form in which results live in the repository.

``method_cards/runs/<experiment>.jsonl`` holds one line per finished run, keys sorted, so a line
never changes once written and a diff shows only the runs that were added:

* identity: ``experiment``, ``arm``, ``seed``, ``config_hash``, ``mlflow_run_id``, ``run_name`` and the ``cadence.*``
  tags (group, baseline, curve and family hashes, budget, grid membership, the command, and the
  ``study`` and ``role`` a study's report filters on);
* ``params``: every setting as MLflow holds it; ``machine`` (CPU/GPU name, threads, Python, driver)
  and ``versions`` (torch, cadence, ..., git sha), split off for reading;
* among the params, ``effects.<method>`` (the method's name without its variant label, as in ``method.<method>``):
  what the run's own instance of the method declares to the composition check (`cadence.engine.DeclaredMethod`
  as compact JSON; `effects_param`), so that the reading wing can tell which methods may run together and which
  follow the run's length without importing them. A record tagged ``cadence.effects`` = ``backfilled`` was
  written before runs logged them: its declarations were added to its line later (one rewrite, nothing else
  changed), from the classes then installed built with their default arguments, not with the run's;
* ``final``: the run's final metrics, with the costs: ``train_s``, ``cpu_s`` (process CPU time),
  ``flops`` (training FLOPs), ``wall_s``, ``eval_s``;
* ``evals``: each evaluation's step, accuracy (and a language model's perplexity), and the costs spent up to it.

The records are the contract between the harness's two wings: the running wing
(`cadence_harness.running`) writes them and the reading wing (`cadence_harness.reading`) reads
nothing else; this module imports neither. `cadence-bench report --records` builds every table and
plot from these files alone (no MLflow); `cadence-bench grid` imports them into its MLflow store
(`cadence_harness.running.bridge`), a fresh one too, and skips what they hold; it appends each run
it finishes, tagged with its study and role (`cadence_harness.running.membership`). Two machines'
files merge by concatenation: duplicate runs are read once, and of two runs of one configuration
the newer counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence.engine import DeclaredMethod
from cadence.time import Time

__all__ = [
    "EFFECTS_PARAM",
    "EVAL_KEYS",
    "TAG",
    "RecordError",
    "RunRecord",
    "append_records",
    "arm_methods",
    "arm_spellings",
    "base_method",
    "budget_value",
    "default_records_dir",
    "effects_param",
    "latest_per_config",
    "machine_name",
    "read_records",
    "recorded_declaration",
    "records_file",
    "run_length_reason",
    "same_machine",
]

TAG = "cadence."  # prefix of every tag the harness writes, and of a record's identity tags
FORMAT = 1
EVAL_KEYS = {  # the per-evaluation metrics a record keeps, by their short name
    "accuracy": "metrics/eval/MulticlassAccuracy",  # a language model's: next-token accuracy
    "perplexity": "metrics/eval/LanguagePerplexity",  # language models only
    "train_s": "time/train_s",
    "cpu_s": "time/cpu_s",
    "flops": "cost/flops",
    "cycle_end": "curve/cycle_end",
}
EFFECTS_PARAM = "effects."  # + a method's name without its variant label: what the run's instance declares
MACHINE_PARAMS = ("device_name", "host_cpu", "cpu_threads", "python", "cuda_driver", "boot_id")
_IMPORT_TAGS = (f"{TAG}record_run_id", f"{TAG}imported_from")  # where an imported copy came from: not the run's


class RecordError(ValueError):
    """A run-record file that cannot be read: the message names the file and line."""


@dataclass(frozen=True)
class RunRecord:
    """One finished run, read from MLflow or from a record line."""

    run_id: str
    experiment: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    evals: tuple[dict[str, float], ...] = ()
    end_time: int = 0  # ms since the epoch; of two runs of one configuration, the newer counts
    source: str = "mlflow"  # or the record file it came from
    run_name: str = ""  # the MLflow run name (``arm-budget-sSEED``)

    def tag(self, name: str, default: str = "") -> str:
        return self.tags.get(f"{TAG}{name}", default)

    @property
    def arm(self) -> str:
        return self.tag("arm", "?")

    @property
    def seed(self) -> int:
        return int(self.tag("seed", "-1"))

    @property
    def config_hash(self) -> str:
        return self.tag("config_hash", self.run_id)

    @property
    def group_hash(self) -> str:
        return self.tag("group_hash")

    @property
    def baseline_hash(self) -> str:
        return self.tag("baseline_hash")

    @property
    def curve_hash(self) -> str:  # runs logged before budgets existed: one budget, one curve per group
        return self.tag("curve_hash", self.group_hash)

    @property
    def baseline_curve_hash(self) -> str:
        return self.tag("baseline_curve_hash", self.baseline_hash)

    @property
    def family_hash(self) -> str:
        return self.tag("family_hash", self.baseline_hash)

    @property
    def budget(self) -> str:
        return self.tag("budget", self.params.get("duration", "?"))

    @property
    def cycles(self) -> tuple[str, ...]:
        text = self.tag("cycles")
        return tuple(text.split(",")) if text else ()

    @property
    def command(self) -> str:
        return self.tag("command")

    @property
    def record_id(self) -> str:
        """The id of the MLflow run that trained it (an imported run keeps its original's)."""
        return self.tag("record_run_id", self.run_id)

    # Record lines ---------------------------------------------------------------------------
    def to_json(self) -> str:
        params = dict(self.params)
        machine = {key: params.pop(key) for key in MACHINE_PARAMS if key in params}
        versions = {key: params.pop(key) for key in list(params) if key.startswith("versions.") or key == "git_sha"}
        line = {
            "format": FORMAT,
            "experiment": self.experiment,
            "mlflow_run_id": self.record_id,
            "run_name": self.run_name,
            "arm": self.arm,
            "seed": self.seed,
            "config_hash": self.config_hash,
            "end_time": self.end_time,
            "tags": {k: v for k, v in self.tags.items() if k.startswith(TAG) and k not in _IMPORT_TAGS},
            "params": params,
            "machine": machine,
            "versions": versions,
            "final": {k.removeprefix("final/"): v for k, v in self.metrics.items() if k.startswith("final/")},
            "evals": list(self.evals),
        }
        return json.dumps(line, sort_keys=True, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, line: str, source: str = "") -> RunRecord:
        data = json.loads(line)
        if data.get("format") != FORMAT:
            raise ValueError(f"record format {data.get('format')!r} is not {FORMAT}: written by another version")
        return cls(
            run_id=data["mlflow_run_id"],
            experiment=data["experiment"],
            tags=dict(data["tags"]),
            params={**data["params"], **data["machine"], **data["versions"]},
            metrics={f"final/{k}": float(v) for k, v in data["final"].items()},
            evals=tuple(data["evals"]),
            end_time=int(data.get("end_time", 0)),
            source=source,
            run_name=str(data.get("run_name", "")),
        )


def default_records_dir(given: str | Path | None = None) -> Path:
    """`given`, else ``$CADENCE_RECORDS``, else the repository's ``method_cards/runs`` (in a checkout of
    cadence), else ``method_cards/runs`` in the working directory."""
    given = given or os.environ.get("CADENCE_RECORDS")
    if given:
        return Path(given)
    cards = Path(__file__).resolve().parents[3] / "method_cards"
    return cards / "runs" if cards.is_dir() else Path("method_cards") / "runs"


def records_file(records_dir: str | Path, experiment: str) -> Path:
    return Path(records_dir) / f"{experiment}.jsonl"


def read_records(paths: Iterable[str | Path]) -> list[RunRecord]:
    """Every record in the files (a folder means its ``*.jsonl``), each run once."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.glob("*.jsonl"))
        elif path.is_file():
            files.append(path)
        else:
            raise RecordError(
                f"`--records` {str(path)!r}: no such file or folder of run records (*.jsonl); pass the folder that "
                "holds <experiment>.jsonl, e.g. method_cards/runs"
            )
    records: dict[str, RunRecord] = {}
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = RunRecord.from_json(line, source=str(file))
            except (ValueError, KeyError, TypeError) as error:
                raise RecordError(
                    f"{file}:{number}: not a run record ({error}); each line must be one run as `cadence-bench "
                    "export` writes it: fix or remove the line"
                ) from None
            records.setdefault(record.run_id, record)
    return list(records.values())


def append_records(path: str | Path, records: Iterable[RunRecord]) -> None:
    """Append `records` to the record file `path` (created with its folder), one line each."""
    lines = [record.to_json() + "\n" for record in records]
    if lines:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(lines))


def same_machine(runs: Iterable[RunRecord]) -> str | None:
    """The machine every one of `runs` ran on (its recorded ``device_name``, and on a GPU its ``host_cpu``), or
    None where they ran on several.

    Times are compared only within one machine: the same computation's time differs across machines by more
    than most methods' effects (a bf16 ResNet-20 run took 0.54x the time on one "AMD EPYC" as on another, and
    a host-bound GPU run depends on its host). FLOPs and accuracy compare across machines; times do not."""
    names = {machine_name(run.params) for run in runs}
    return names.pop() if len(names) == 1 else None


def machine_name(params: Mapping[str, Any]) -> str:
    """A run's machine from its params, as `same_machine` compares them: its ``device_name``, and on a GPU
    ``on`` its ``host_cpu`` (``"NVIDIA H200 on AMD EPYC"``)."""
    return " on ".join(filter(None, (str(params.get("device_name", "")), str(params.get("host_cpu", "")))))


def run_length_reason(methods: Sequence[str]) -> str:
    """Why `methods` get no cyclic run, in words: the grid that runs their sweep and the search that sets their
    cyclic screens aside say it alike."""
    verb = "follows" if len(methods) == 1 else "follow"
    return f"{', '.join(methods)} {verb} the elapsed fraction of the run, which no cycle of a cyclic run restarts"


def arm_spellings(arm: str) -> list[str]:
    """The methods of an arm's name as it spells them: ``"mixup@claimed+cutout"`` -> ``["mixup@claimed", "cutout"]``
    (a variant, ``method@label``, is the method at other hyperparameters; see the harness README)."""
    return [] if arm == "baseline" else arm.split("+")


def arm_methods(arm: str) -> list[str]:
    """The methods of an arm's name, each without its variant label: ``"mixup@claimed+cutout"`` -> ``["mixup",
    "cutout"]``."""
    return [base_method(name) for name in arm_spellings(arm)]


def base_method(name: str) -> str:
    """The method of a (possibly variant) name: ``"mixup@claimed"`` -> ``"mixup"``."""
    return name.partition("@")[0]


def effects_param(name: str, declared: DeclaredMethod) -> tuple[str, str]:
    """The param (key, value) that records what the run's method `name` (a variant as its method: MLflow keys
    allow no ``@``) declares; compact JSON, so that one declaration is always one string."""
    return EFFECTS_PARAM + base_method(name), json.dumps(declared.to_dict(), sort_keys=True, separators=(",", ":"))


def recorded_declaration(record: RunRecord, name: str) -> DeclaredMethod | None:
    """What the method `name` (as the record's arm spells it) declared in the run `record`, or None where the
    record holds no declaration of it (`effects_param`)."""
    key = EFFECTS_PARAM + base_method(name)
    text = record.params.get(key)
    if text is None:
        return None
    try:
        return DeclaredMethod.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError) as error:
        raise RecordError(
            f"{record.source or 'a run record'}: run {record.run_name or record.run_id}, param {key}: not a method "
            f"declaration ({error}); it must be what `cadence-bench` logs there: fix or remove the param"
        ) from None


def budget_value(duration: str) -> float:
    """The number in a duration (``"16ep"`` -> 16): budgets of one recipe share a unit, so it orders them."""
    return float(Time.from_input(duration).value)


def latest_per_config(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The newest run of each configuration hash: a configuration run twice counts once, never as two seeds."""
    newest: dict[str, RunRecord] = {}
    for record in records:
        kept = newest.get(record.config_hash)
        if kept is None or record.end_time > kept.end_time:
            newest[record.config_hash] = record
    return list(newest.values())
