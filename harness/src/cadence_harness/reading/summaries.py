"""Summaries of run records: each configuration over its seeds (`ArmSummary`), and the sections of a report
(`Section`: one family of one experiment, with its curves and speedups at matched accuracy).

A summary never pools different configurations:

* runs are grouped by their whole configuration except the seed (``cadence.group_hash``); a
  configuration that ran twice counts once, its newer run, never as two seeds;
* the groups are split into sections by family (everything but the methods and the budget): one
  section per study, whose header names only the settings every run of it shares (a second machine
  is named with its run count); the budget, when it varies, is a column;
* each arm is compared with the baseline of its own configuration on the same seeds, and its
  tradeoff curve with the baseline's curve of its family (`cadence_harness.reading.tradeoff`);
* the better/worse cells of a section's speedup tables are one family: their p-values are adjusted
  together (Benjamini-Hochberg) before a cell is called better or worse;
* times are compared only between runs of one machine (`cadence_harness.records.same_machine`): an arm
  run on another machine than its baseline gets accuracy and FLOPs comparisons, and no time speedup;
* an *identity arm* measures nothing but the machine: its time ratios are the section's timing noise
  floor (`cadence_harness.reading.noise_floor`), shown instead of speedups.

See `cadence_harness.stats` for which interval is used where.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from cadence_harness.reading.noise_floor import NoiseFloor, identity_arms
from cadence_harness.reading.peaks import peak_fraction
from cadence_harness.reading.tradeoff import (
    COSTS,
    TIMED,
    Curve,
    Speedup,
    curves_from_records,
    floor_of,
    matched_speedups,
)
from cadence_harness.records import RunRecord, arm_methods, budget_value, latest_per_config, same_machine
from cadence_harness.stats import (
    Interval,
    benjamini_hochberg,
    log_t_interval,
    paired_log_interval,
    paired_t_difference,
    paired_t_p_value,
    paired_t_ratio,
    t_interval,
)

__all__ = [
    "SETTINGS",
    "TIMES",
    "ArmSummary",
    "Section",
    "paired_values",
    "sections_of",
    "speedup_to_target",
    "summarize",
]


SETTINGS = ("model", "data", "subset", "eval_subset", "duration", "batch_size", "precision", "device_name")


@dataclass
class ArmSummary:
    """One configuration (an arm at one budget) over its seeds, compared with its baseline."""

    experiment: str
    arm: str
    group_hash: str
    seeds: list[int]
    accuracy: Interval
    train_s: Interval
    wall_s: Interval
    samples_per_s: Interval
    peak_memory_mb: Interval
    time_to_target: Interval
    reached: int
    target: float | None
    cpu_s: Interval = field(default_factory=lambda: t_interval([]))
    perplexity: Interval = field(default_factory=lambda: t_interval([]))  # language models only
    flops: Interval = field(default_factory=lambda: t_interval([]))
    flops_per_s: Interval = field(default_factory=lambda: t_interval([]))  # model FLOP/s: training FLOPs / train_s
    peak_fraction: Interval = field(default_factory=lambda: t_interval([]))  # of the device's peak; n=0: unknown
    budget: str = ""
    cyclic: bool = False
    family_hash: str = ""
    accuracy_delta: Interval | None = None
    accuracy_p: float | None = None  # two-sided paired t-test of accuracy_delta against 0
    accuracy_q: float | None = None  # its Benjamini-Hochberg q-value over the section's accuracy cells (< 0.05: found)
    speedup: Interval | None = None  # baseline time / arm time at the same budget
    flops_ratio: Interval | None = None  # baseline FLOPs / arm FLOPs at the same budget
    ratio_p: dict[str, float | None] = field(default_factory=dict)  # "train_s"/"flops": the paired t-test of that ratio
    ratio_q: dict[str, float] = field(default_factory=dict)  # ... its Benjamini-Hochberg q over the section's ratios
    speedup_to_target: Interval | None = None
    run_ids: list[str] = field(default_factory=list)
    command: str = ""
    params: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Counter[str]] = field(default_factory=dict)  # setting -> its values over the runs

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def methods(self) -> list[str]:
        return arm_methods(self.arm)  # a variant's method by its name: mixup@claimed is mixup

    @property
    def budget_label(self) -> str:
        return f"{self.budget} (cyclic)" if self.cyclic else self.budget

    @property
    def label(self) -> str:
        return self.arm


def _metric(records: Sequence[RunRecord], key: str) -> list[float]:
    return [r.metrics[key] for r in records if key in r.metrics and not math.isnan(r.metrics[key])]


def _flop_rates(records: Sequence[RunRecord]) -> tuple[list[float], list[float]]:
    """Each run's model FLOP/s, and its fraction of its device's peak: the latter only when every run's peak is
    known (a mean over the runs that have one would describe other runs than the row's)."""
    rates, fractions = [], []
    for record in records:
        flops, train_s = record.metrics.get("final/flops"), record.metrics.get("final/train_s")
        if flops is None or not train_s or math.isnan(flops) or math.isnan(train_s) or train_s <= 0:
            continue
        rates.append(flops / train_s)
        params = record.params
        fractions.append(peak_fraction(rates[-1], params.get("device_name", ""), params.get("precision", "")))
    known = [f for f in fractions if f is not None]
    return rates, known if len(known) == len(fractions) else []


def _target(records: Sequence[RunRecord]) -> float | None:
    value = records[0].params.get("target_accuracy", "None")
    return None if value in ("None", "") else float(value)


def _summarize_group(records: list[RunRecord]) -> ArmSummary:
    records = sorted(records, key=lambda r: r.seed)
    first = records[0]
    commands = Counter(r.command for r in records if r.command)
    settings = {key: Counter(r.params.get(key, "None") for r in records) for key in SETTINGS}
    rates, fractions = _flop_rates(records)
    return ArmSummary(
        experiment=first.experiment,
        arm=first.arm,
        group_hash=first.group_hash,
        seeds=[r.seed for r in records],
        accuracy=t_interval(_metric(records, "final/accuracy")),
        train_s=log_t_interval(_metric(records, "final/train_s")),
        wall_s=log_t_interval(_metric(records, "final/wall_s")),
        samples_per_s=log_t_interval(_metric(records, "final/samples_per_s")),
        peak_memory_mb=log_t_interval(_metric(records, "final/peak_memory_mb")),
        time_to_target=log_t_interval(_metric(records, "final/time_to_target_s")),
        reached=int(sum(_metric(records, "final/reached_target"))),
        target=_target(records),
        cpu_s=log_t_interval(_metric(records, "final/cpu_s")),
        perplexity=log_t_interval(_metric(records, "final/perplexity")),
        flops=log_t_interval(_metric(records, "final/flops")),
        flops_per_s=log_t_interval(rates),
        peak_fraction=log_t_interval(fractions),
        budget=first.budget,
        cyclic=bool(first.cycles),
        family_hash=first.family_hash,
        run_ids=[r.run_id for r in records],
        command=commands.most_common(1)[0][0] if commands else "",
        params=dict(first.params),
        settings=settings,
    )


TIMES = frozenset({*(f"final/{unit}" for unit in TIMED), "final/wall_s", "final/time_to_target_s"})  # machine-bound


def paired_values(arm: Sequence[RunRecord], base: Sequence[RunRecord], key: str) -> tuple[list[float], list[float]]:
    """Values of `key` for the seeds both groups have (and both logged); for a time, only the seeds whose two
    runs ran on one machine (`same_machine`)."""
    values = [(r.metrics.get(key), b.metrics.get(key)) for r, b in _paired_runs(arm, base, timed=key in TIMES)]
    kept = [(a, b) for a, b in values if a is not None and b is not None]
    return [a for a, _ in kept], [b for _, b in kept]


def _paired_runs(arm: Sequence[RunRecord], base: Sequence[RunRecord], timed: bool) -> list[tuple[RunRecord, RunRecord]]:
    """(arm run, baseline run) of each seed both groups ran; `timed`: only the pairs that ran on one machine."""
    by_seed = {r.seed: r for r in base}
    pairs = [(r, by_seed[r.seed]) for r in arm if r.seed in by_seed]
    return [(r, b) for r, b in pairs if same_machine((r, b)) is not None] if timed else pairs


def _compare(summary: ArmSummary, arm: list[RunRecord], base: list[RunRecord]) -> None:
    accuracy, base_accuracy = paired_values(arm, base, "final/accuracy")
    if accuracy:
        summary.accuracy_delta = paired_t_difference(accuracy, base_accuracy)
        summary.accuracy_p = paired_t_p_value(accuracy, base_accuracy)
    for key, attribute in (("final/train_s", "speedup"), ("final/flops", "flops_ratio")):
        cost, base_cost = paired_values(arm, base, key)
        if cost:
            setattr(summary, attribute, paired_t_ratio(base_cost, cost))
            if all(c > 0 for c in (*cost, *base_cost)):  # the paired t-test on the log ratios, for `ratio_q`
                summary.ratio_p[key.removeprefix("final/")] = paired_t_p_value(_logs(base_cost), _logs(cost))
    summary.speedup_to_target = speedup_to_target(arm, base)


def speedup_to_target(arm: Sequence[RunRecord], base: Sequence[RunRecord]) -> Interval | None:
    """Baseline time to target / arm time to target, paired by seed over the seeds both ran on one machine, or None
    where no run of them reached the target. A run that never reached it trained its whole budget short of it, so
    its time to target is known only as above its training time and its seed's ratio only as a bound: every seed
    counts (those that reached it alone would favour whichever side reached it less often), the interval rests on
    the bounds (`paired_log_interval`), and the point estimate, the geometric mean, is NaN unless every ratio is
    known."""
    pairs = [(r, b) for r, b in _paired_runs(arm, base, timed=True) if r.metrics.get("final/train_s")]
    pairs = [(r, b) for r, b in pairs if b.metrics.get("final/train_s")]
    reach = [(r.metrics.get("final/time_to_target_s"), b.metrics.get("final/time_to_target_s")) for r, b in pairs]
    if all(a is None and b is None for a, b in reach):
        return None
    bounds = []
    for (run, base_run), (arm_t, base_t) in zip(pairs, reach, strict=True):
        arm_low = arm_t if arm_t is not None else run.metrics["final/train_s"]  # time to target >= this
        base_low = base_t if base_t is not None else base_run.metrics["final/train_s"]
        low = math.log(base_low / arm_t) if arm_t is not None else -math.inf
        high = math.log(base_t / arm_low) if base_t is not None else math.inf
        bounds.append((low, high))
    known = all(low == high for low, high in bounds)
    mean = math.exp(sum(low for low, _ in bounds) / len(bounds)) if known else math.nan
    if len(bounds) < 2:
        return Interval(mean, None, None, len(bounds))
    low, high, _, _ = paired_log_interval(bounds)
    return Interval(mean, low, high, len(bounds))


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(value) for value in values]


def _order(summary: ArmSummary) -> tuple[object, ...]:
    budget = budget_value(summary.budget) if summary.budget[:1].isdigit() else 0.0
    return (summary.experiment, summary.arm != "baseline", len(summary.methods), summary.arm, summary.cyclic, budget)


def summarize(records: Sequence[RunRecord]) -> list[ArmSummary]:
    """One summary per configuration (arm and budget, seeds pooled), each compared with its baseline."""
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in latest_per_config(records):
        groups[record.group_hash].append(record)
    summaries = []
    for group in groups.values():
        summary = _summarize_group(group)
        base = groups.get(group[0].baseline_hash)
        if base is not None and summary.arm != "baseline":
            _compare(summary, group, base)
        summaries.append(summary)
    return sorted(summaries, key=_order)


def _adjust(section: Section) -> None:
    """Leave the identity arms' time cells out (they are the noise floor) and adjust the p-values of every other
    judged speedup cell of the section together (Benjamini-Hochberg): the q-values decide better and worse. The
    section's accuracy cells (each arm and budget against the baseline) are a second family, adjusted the same
    way: with 80 of them, one 95% interval in twenty excludes 0 by chance. The time and FLOPs ratios at the same
    budget are a third (they judge an arm that has no curve, `plain.effects`)."""
    rows = [s for s in section.summaries if s.accuracy_p is not None]
    for row, q in zip(rows, benjamini_hochberg([s.accuracy_p for s in rows])):  # type: ignore[misc]
        row.accuracy_q = q
    identities = set(section.noise_floor.arms) if section.noise_floor else set()
    cells = []
    for (curve_hash, unit), speedups in section.speedups.items():
        arm = next(c.arm for c in section.curves if c.curve_hash == curve_hash)
        if arm in identities and unit != "flops":
            reason = "identity arm: its time ratio is the study's timing noise, not a speedup"
            section.speedups[(curve_hash, unit)] = [dataclasses.replace(s, left_out=reason) for s in speedups]
            continue
        cells += [(curve_hash, unit, j) for j, s in enumerate(speedups) if s.p is not None and not s.left_out]
    q_values = benjamini_hochberg([section.speedups[(h, u)][j].p for h, u, j in cells])  # type: ignore[misc]
    for (curve_hash, unit, j), q in zip(cells, q_values):
        cell_speedups = section.speedups[(curve_hash, unit)]
        cell_speedups[j] = dataclasses.replace(cell_speedups[j], q=q)
    ratios = [(s, unit, p) for s in section.summaries for unit, p in s.ratio_p.items() if p is not None]
    for (row, unit, _), q in zip(ratios, benjamini_hochberg([p for _, _, p in ratios])):  # a third family
        row.ratio_q[unit] = q


# Sections: one per study (family) ----------------------------------------------------------
@dataclass
class Section:
    """The runs of one family of one experiment: its summaries, curves and speedups at matched accuracy."""

    experiment: str
    family_hash: str
    name: str  # the experiment, with what sets this family apart when the experiment holds several
    summaries: list[ArmSummary]
    records: list[RunRecord]
    curves: list[Curve] = field(default_factory=list)
    speedups: dict[tuple[str, str], list[Speedup]] = field(default_factory=dict)  # (curve hash, unit) -> per budget
    noise_floor: NoiseFloor | None = None  # the timing noise of identical computations, when an identity arm shows it
    floor: float | None = None  # the accuracy of a constant prediction (`tradeoff.floor_of`), left out of speedups

    @property
    def has_tradeoff(self) -> bool:
        return any(len(c.budgets) > 1 or c.cyclic for c in self.curves)

    def baseline_curve(self, curve: Curve) -> Curve | None:
        return next((c for c in self.curves if c.curve_hash == curve.baseline_curve_hash), None)

    def sweep_curve(self, arm: str) -> Curve | None:
        """The arm's curve over its budgets (not its cyclic one), if the section has it."""
        return next((c for c in self.curves if c.arm == arm and not c.cyclic), None)

    def cyclic_curve(self, arm: str) -> Curve | None:
        """The arm's cyclic curve (one run per seed, its cycles ending at the budgets), if the section has it."""
        return next((c for c in self.curves if c.arm == arm and c.cyclic), None)

    def speedups_of(self, curve: Curve, unit: str) -> list[Speedup]:
        """The curve's speedups at matched accuracy in `unit`, budget by budget (empty without a baseline)."""
        return self.speedups.get((curve.curve_hash, unit), [])


_SCALE_OUT = {"world_size": "1", "sharding": "none"}  # what runs before `--nproc` existed were: one process


def _family_names(families: dict[str, list[ArmSummary]]) -> dict[str, str]:
    """A short name for each family of one experiment: the settings in which it differs from the others."""
    if len(families) < 2:
        return dict.fromkeys(families, "")
    values = {
        f: {
            **{k: sorted({v for s in rows for v in s.settings.get(k, {})}) for k in SETTINGS},
            **{k: sorted({s.params.get(k, default) for s in rows}) for k, default in _SCALE_OUT.items()},
        }
        for f, rows in families.items()
    }
    names = {}
    for family, own in values.items():
        differing = [
            k for k in own if k not in ("duration", "device_name") and any(v[k] != own[k] for v in values.values())
        ]
        names[family] = ", ".join(f"{k} {'/'.join(own[k])}" for k in differing) or f"configuration {family[:8]}"
    return names


def sections_of(records: Sequence[RunRecord], summaries: Sequence[ArmSummary] | None = None) -> list[Section]:
    """The report's sections, each with its curves and the speedups of every arm's curve against its baseline's."""
    kept = latest_per_config(records)
    summaries = list(summaries) if summaries is not None else summarize(kept)
    by_experiment: dict[str, dict[str, list[ArmSummary]]] = defaultdict(lambda: defaultdict(list))
    for summary in summaries:
        by_experiment[summary.experiment][summary.family_hash].append(summary)
    sections = []
    for experiment, families in by_experiment.items():
        names = _family_names(families)
        for family, rows in families.items():
            runs = [r for r in kept if r.experiment == experiment and r.family_hash == family]
            name = f"{experiment} ({names[family]})" if names[family] else experiment
            section = Section(experiment, family, name, rows, runs, curves_from_records(runs))
            section.noise_floor = identity_arms(runs)
            sweep = section.sweep_curve("baseline")
            section.floor = floor_of(sweep) if sweep is not None else None
            for curve in section.curves:
                base = section.baseline_curve(curve)
                if base is not None and curve.arm != "baseline":
                    for unit in COSTS:
                        floor = section.floor if not curve.cyclic else floor_of(base)
                        section.speedups[(curve.curve_hash, unit)] = matched_speedups(curve, base, unit, floor=floor)
            _adjust(section)
            sections.append(section)
    return sections
