"""What a grid's runs cost on one device, read off the study's own run records: `grid --estimate`'s reference.

A study that ran part of its grid on a GPU knows, better than any measurement on this machine, what
its runs cost there. From the records of the study (``method_cards/runs/<study>.jsonl``) on one
device (``device_name``, the exact card):

* the baseline's training rate: its training FLOPs over its training time, over all its runs
  (sweep runs of the grid's own baseline configuration; else, said so, of an earlier configuration of
  the study with the same model, data, batch size and precision);
* seconds per evaluation (``final/eval_s`` over the run's evaluations) and the rest of ``fit``
  outside training and evaluation per run (warm-up, compilation, FLOP counting);
* per-run start-up outside ``fit`` (process start or in-process set-up, data, model, logging, the
  record): the gap between the end times of consecutive runs less the later run's ``fit``, for gaps
  of a grid running one run at a time (a gap over `MAX_GAP_S` is a pause between chunks, not start-up;
  grids run with ``--jobs`` above 1 overlap and are left out); the median over those gaps;
* each configuration (arm and budget) that already has runs there: their own mean costs, which
  include whatever work its methods add to the baseline's.

Only records: no MLflow, no torch, nothing is run.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cadence_harness.records import RunRecord

__all__ = ["MAX_GAP_S", "Costs", "Reference", "reference_from_records", "startup_gaps"]

MAX_GAP_S = 300.0
_JOBS = re.compile(r"--jobs[ =](\d+)")


@dataclass(frozen=True)
class Costs:
    """Seconds of one run, split the way it spends them (start-up outside ``fit`` apart)."""

    train_s: float
    eval_s: float
    other_s: float  # in fit, outside training and evaluation

    @property
    def total(self) -> float:
        return self.train_s + self.eval_s + self.other_s


@dataclass
class Reference:
    """The costs of a study's runs on `device`, from `baseline_runs` recorded baseline runs."""

    device: str
    baseline_runs: int
    same_family: bool  # the grid's own baseline configuration (else an earlier one of the study)
    rate: float  # training FLOP/s of the baseline
    eval_s: float  # per evaluation
    other_s: float  # per run: the rest of fit
    startup_s: float | None  # per run, outside fit; None when no gap could be read
    gaps: int  # how many gaps the start-up is the median of
    recorded: dict[str, Costs] = field(default_factory=dict)  # group hash -> its runs' mean costs on the device

    def costs(self, group_hash: str, train_flops: float, evaluations: int) -> tuple[Costs, bool]:
        """A run's costs: its configuration's own recorded costs (True) or the baseline's rate (False)."""
        own = self.recorded.get(group_hash)
        if own is not None:
            return own, True
        return Costs(train_flops / self.rate, evaluations * self.eval_s, self.other_s), False

    def describe(self) -> str:
        which = "the grid's baseline configuration" if self.same_family else "an earlier baseline configuration"
        startup = (
            f"start-up {self.startup_s:.1f} s per run (median of {self.gaps} gaps between consecutive runs' ends, "
            "less their fit)"
            if self.startup_s is not None
            else "start-up: no two consecutive runs recorded, not counted"
        )
        runs = f"{self.baseline_runs} recorded run{'s' if self.baseline_runs != 1 else ''}"
        return (
            f"{runs} of {which} on {self.device}: training {self.rate / 1e12:.2f} "
            f"TFLOP/s, {self.eval_s:.2f} s per evaluation, {self.other_s:.1f} s per run of warm-up and the rest of "
            f"fit; {startup}"
        )


def _fit_costs(record: RunRecord) -> Costs | None:
    m = record.metrics
    train_s, wall_s = m.get("final/train_s"), m.get("final/wall_s")
    if not train_s or not wall_s:
        return None
    eval_s = m.get("final/eval_s", 0.0)
    return Costs(train_s, eval_s, max(wall_s - train_s - eval_s, 0.0))


def _mean_costs(records: Sequence[RunRecord]) -> Costs | None:
    costs = [c for c in map(_fit_costs, records) if c is not None]
    if not costs:
        return None
    return Costs(*(statistics.fmean(getattr(c, k) for c in costs) for k in ("train_s", "eval_s", "other_s")))


def startup_gaps(records: Sequence[RunRecord]) -> list[float]:
    """Seconds between consecutive runs outside their fit, for runs of one device one at a time (module doc)."""
    ordered = sorted((r for r in records if r.end_time and "final/wall_s" in r.metrics), key=lambda r: r.end_time)
    gaps = []
    for previous, record in itertools.pairwise(ordered):
        jobs = _JOBS.search(record.command)
        if jobs and int(jobs.group(1)) > 1:
            continue
        gap = (record.end_time - previous.end_time) / 1000 - record.metrics["final/wall_s"]
        if 0 <= gap <= MAX_GAP_S:
            gaps.append(gap)
    return gaps


def _pick_device(baselines: Sequence[RunRecord], device: str | None) -> str | None:
    """`device`, or where it is None (a GPU recipe estimated without a GPU) the GPU most baseline runs used."""
    if device is not None:
        return device
    gpus = Counter(
        r.params["device_name"] for r in baselines if "cuda_driver" in r.params and "device_name" in r.params
    )
    return gpus.most_common(1)[0][0] if gpus else None


def reference_from_records(
    records: Sequence[RunRecord],
    *,
    experiment: str,
    families: set[str],
    like: Mapping[str, str],
    device: str | None,
) -> Reference | None:
    """The reference of `experiment` on `device` (None: the GPU its records used most), or None without
    recorded baseline runs there. `families`: the family hashes of the grid to estimate; `like`: the params
    an earlier baseline configuration must share to stand in (model, data, batch size, precision)."""
    mine = [r for r in records if r.experiment == experiment]
    baselines = [
        r for r in mine if r.arm == "baseline" and not r.cycles and _fit_costs(r) and r.metrics.get("final/flops")
    ]
    device = _pick_device(baselines, device)
    on_device = [r for r in baselines if r.params.get("device_name") == device]
    own = [r for r in on_device if r.family_hash in families]
    chosen = own or [r for r in on_device if all(r.params.get(k) == str(v) for k, v in like.items())]
    if device is None or not chosen:
        return None
    costs = [c for c in map(_fit_costs, chosen) if c is not None]
    evaluations = [max(len(r.evals), 1) for r in chosen]
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in mine:
        if record.params.get("device_name") == device and not record.cycles:
            groups[record.group_hash].append(record)
    gaps = startup_gaps([r for r in mine if r.params.get("device_name") == device])
    return Reference(
        device=device,
        baseline_runs=len(chosen),
        same_family=bool(own),
        rate=sum(r.metrics["final/flops"] for r in chosen) / sum(c.train_s for c in costs),
        eval_s=sum(c.eval_s for c in costs) / sum(evaluations),
        other_s=statistics.median(c.other_s for c in costs),
        startup_s=statistics.median(gaps) if gaps else None,
        gaps=len(gaps),
        recorded={g: c for g, runs in groups.items() if (c := _mean_costs(runs)) is not None},
    )
