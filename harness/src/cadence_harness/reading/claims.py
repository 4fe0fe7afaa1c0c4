"""The claim table of a method card: what the method's authors or Composer report, judged on a study.

A card lists its claims in its front matter, each with what it expects of the method alone and the
conditions it was made under:

    claims:
      - claim: "+0.5-1% top-1 on ImageNet for a few percent more compute"
        source: "Zhang, ICML 2019; Composer's card"
        expects: accuracy     # more accurate than the baseline at the same budget
        conditions: {min_steps: 10000}   # what a study needs to test it (below)
        settings: {alpha: 1.0}           # the hyperparameters it was made with (`claim_arms`)
      - claim: "1.5x faster time-to-train"
        source: "..."
        expects: speedup      # reaches the baseline's accuracy for less cost (matched accuracy)
        unit: train_s         # which cost: flops (the default), train_s or cpu_s
        size: 1.5             # the claimed factor
        conditions: {device: cuda, data: imagenet}
      - claim: "fewer multiply-adds per step"
        source: "..."
        expects: cost         # the baseline's cost over the arm's at the same budget
        by_construction: "the factorized layers do fewer multiply-adds by design"

Each verdict is one of four:

* **consistent with the claim**: the interval excludes no effect, on the claimed side, and does not
  exclude the claimed factor (a claimed 1.5x is consistent with 1.66x [1.2, 2.3]: a factor above the
  claim is not held against it);
* **contradicts the claim**: the interval excludes no effect on the other side, or lies below the
  claimed factor;
* **inconclusive**: neither (the interval is too wide to tell), or a time claim smaller than the
  study's timing noise floor (`cadence_harness.reading.noise_floor`), or a time claim in a study
  without an identity arm that measured that floor on the baseline's machine;
* **not testable here**: the study does not meet the claim's `conditions` (or its free-text
  `not_here`), or did not run the method alone.

A FLOPs cost claim that holds by the method's construction (`by_construction`) gets no verdict: it
is labelled *by construction*, with the measured ratio.

What is tested, on the method's own arm at the claim's `settings` (`cadence_harness.reading.claim_arms`;
`cadence_harness.stats`: paired Student-t, n beside every interval):

* ``accuracy``: the paired Δ accuracy against the baseline at the longest budget the arm has;
* ``speedup``: the speedup at matched accuracy at each budget (`cadence_harness.reading.tradeoff`;
  points at the study's accuracy floor are left out); consistent when some budget is consistent
  and none contradicts;
* ``cost``: the baseline's cost over the arm's at the same budget (FLOPs, or time with `unit`),
  on the per-seed log ratios; consistent when every budget is.

Multiplicity: the claims of every card judged on one study are one family (`judge_claims`). Each
comparison contributes its two-sided p-value against no effect, and, with a claimed factor, its
one-sided p-value against the factor; they are Holm-adjusted together, and "excludes" above means
an adjusted p-value below 0.05. The claim table names the family's size.

Conditions (`conditions`) are compared with the study's run records by `cadence_harness.reading.conditions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cadence_harness.reading.claim_arms import claim_arm, settings_text
from cadence_harness.reading.conditions import CONDITIONS, parse_conditions, study_conditions, unmet
from cadence_harness.reading.noise_floor import NoiseFloor
from cadence_harness.reading.summaries import ArmSummary, Section, paired_values
from cadence_harness.reading.tradeoff import COSTS
from cadence_harness.stats import holm, paired_t_difference, paired_t_ratio, t_p_values

__all__ = [
    "BY_CONSTRUCTION",
    "CONDITIONS",
    "CONSISTENT",
    "CONTRADICTS",
    "INCONCLUSIVE",
    "NOT_TESTABLE",
    "VERDICTS",
    "Claim",
    "Judgement",
    "claim_table",
    "judge",
    "judge_claims",
    "parse_claims",
    "study_conditions",
]

EXPECTS = ("accuracy", "speedup", "cost")
CONSISTENT, CONTRADICTS = "consistent with the claim", "contradicts the claim"
INCONCLUSIVE, NOT_TESTABLE = "inconclusive", "not testable here"
VERDICTS = (CONSISTENT, CONTRADICTS, INCONCLUSIVE, NOT_TESTABLE)
BY_CONSTRUCTION = "by construction"  # a label, not a verdict
ALPHA = 0.05
_KEYS = {"claim", "source", "expects", "unit", "not_here", "size", "conditions", "by_construction", "settings"}


@dataclass(frozen=True)
class Claim:
    claim: str
    source: str
    expects: str
    unit: str = "flops"
    not_here: str = ""
    size: float = 1.0  # the factor a speedup or cost claim states (1: any speed-up)
    conditions: tuple[tuple[str, Any], ...] = ()  # (key, value) from `CONDITIONS`
    by_construction: str = ""  # why a FLOPs cost claim holds by design, else ""
    settings: tuple[tuple[str, Any], ...] = ()  # the method's hyperparameters the claim was made with


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str
    family: str = ""  # the multiple-testing family the verdict was corrected in, where it was tested


def parse_claims(front: Mapping[str, Any], where: str) -> list[Claim]:
    """The `claims` of a card's front matter, checked: a card with a malformed claim fails loudly."""
    claims = front.get("claims") or []
    if not isinstance(claims, list):
        raise ValueError(f"{where}: `claims` must be a list of mappings, got {type(claims).__name__}")
    parsed = []
    for index, entry in enumerate(claims):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: claims[{index}] must be a mapping with claim, source and expects")
        unknown = sorted(set(entry) - _KEYS)
        missing = [key for key in ("claim", "source", "expects") if not entry.get(key)]
        if unknown or missing:
            raise ValueError(f"{where}: claims[{index}] has unknown keys {unknown} / lacks {missing}")
        if entry["expects"] not in EXPECTS:
            raise ValueError(f"{where}: claims[{index}].expects={entry['expects']!r}; use one of {EXPECTS}")
        unit = entry.get("unit", "flops")
        if unit not in COSTS:
            raise ValueError(f"{where}: claims[{index}].unit={unit!r}; use one of {tuple(COSTS)}")
        size = entry.get("size", 1.0)
        if entry["expects"] == "accuracy" and "size" in entry:
            raise ValueError(f"{where}: claims[{index}].size is for speedup and cost claims, not accuracy")
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not size >= 1:
            raise ValueError(f"{where}: claims[{index}].size={size!r} must be a factor >= 1, e.g. 1.5 for '1.5x'")
        construction = str(entry.get("by_construction", ""))
        if construction and (entry["expects"] != "cost" or unit != "flops"):
            raise ValueError(
                f"{where}: claims[{index}].by_construction is for FLOPs cost claims (expects: cost, unit: flops), "
                "whose counted FLOPs follow from the method's design"
            )
        conditions = parse_conditions(entry.get("conditions"), f"{where}: claims[{index}]")
        not_here = entry.get("not_here", "")
        settings = entry.get("settings") or {}
        if not isinstance(settings, Mapping):
            raise ValueError(f"{where}: claims[{index}].settings must map hyperparameters to values, e.g. {{alpha: 1}}")
        parsed.append(
            Claim(
                str(entry["claim"]),
                str(entry["source"]),
                entry["expects"],
                unit,
                not_here,
                float(size),
                conditions,
                construction,
                tuple(settings.items()),
            )
        )
    return parsed


# The comparisons behind a claim -------------------------------------------------------------
@dataclass(frozen=True)
class _Test:
    """One comparison behind a claim: its text, one-sided p-values against no effect (up and down), and the
    one-sided p-value that it lies below the claimed factor (None without one)."""

    text: str
    p_up: float
    p_down: float
    p_short: float | None = None

    @property
    def p_none(self) -> float:
        return min(1.0, 2 * min(self.p_up, self.p_down))


@dataclass
class _Evidence:
    tests: list[_Test] = field(default_factory=list)
    every: bool = False  # cost claims: every budget must agree; speedup claims: some budget, none against
    text: str = ""
    early: Judgement | None = None  # a verdict that needs no test


def _paired(section: Section, row: ArmSummary, key: str) -> tuple[list[float], list[float]]:
    """(arm, baseline) values of `key` for the seeds both the row and its baseline (same budget) ran, both numbers
    (`paired_values`: for a time, only the seeds whose two runs ran on one machine)."""
    base = [
        r
        for r in section.records
        if r.arm == "baseline" and not r.cycles and r.budget == row.budget and r.family_hash == row.family_hash
    ]
    mine = [r for r in section.records if r.group_hash == row.group_hash and r.run_id in row.run_ids]
    kept = [(a, b) for a, b in zip(*paired_values(mine, base, key)) if b == b and a == a]
    return [a for a, _ in kept], [b for _, b in kept]


def _log_test(text: str, logs: Sequence[float], size: float) -> _Test:
    p_up, p_down = t_p_values(logs, logs)
    p_short = t_p_values(logs, logs, null=float(np.log(size)))[1] if size > 1 else None
    return _Test(text, p_up, p_down, p_short)


def _evidence(claim: Claim, section: Section, method: str, study: Mapping[str, Any]) -> _Evidence:
    if claim.not_here:
        return _Evidence(early=Judgement(NOT_TESTABLE, claim.not_here))
    unmet_here = unmet(claim.conditions, study)
    if unmet_here:
        return _Evidence(early=Judgement(NOT_TESTABLE, "; ".join(unmet_here)))
    rows, why_not = claim_arm(section, method, claim.settings)
    if not rows:
        return _Evidence(early=Judgement(NOT_TESTABLE, why_not))
    on = f"on `{rows[0].arm}` ({settings_text(claim.settings)}): " if claim.settings else ""
    floor = section.noise_floor
    timed = claim.unit != "flops" and claim.expects != "accuracy"
    if claim.expects == "accuracy":
        last = rows[-1]
        arm, base = _paired(section, last, "final/accuracy")
        delta = paired_t_difference(arm, base) if arm else None
        if delta is None or delta.low is None:
            return _Evidence(early=Judgement(INCONCLUSIVE, f"no paired interval at {last.budget_label} (n={last.n})"))
        text = f"{on}Δ accuracy at {last.budget_label} {delta.format(scale=100)} pp (n={delta.n})"
        differences = [a - b for a, b in zip(arm, base)]
        p_up, p_down = t_p_values(differences, differences)
        return _Evidence([_Test(text, p_up, p_down)], text=text)
    if claim.expects == "cost":
        key = "final/flops" if claim.unit == "flops" else f"final/{claim.unit}"
        tests, parts = [], []
        for row in rows:
            arm, base = _paired(section, row, key)
            if len(arm) < 2 or not all(v > 0 for v in arm + base):
                parts.append(f"{row.budget_label} n/a (n={len(arm)})")
                continue
            ratio = paired_t_ratio(base, arm)
            parts.append(f"{row.budget_label} {ratio.format(suffix='x')} (n={ratio.n})")
            tests.append(_log_test(parts[-1], list(np.log(np.asarray(base) / np.asarray(arm))), claim.size))
        text = f"{on}{COSTS[claim.unit]} ratio " + ", ".join(parts)
        if claim.by_construction:
            return _Evidence(early=Judgement(BY_CONSTRUCTION, f"{claim.by_construction}; measured {text}"))
        if timed and (floor is None or floor.factor is None or claim.size < floor.factor):
            return _Evidence(early=Judgement(INCONCLUSIVE, text + _below_floor(claim, floor)))
        if not tests:
            return _Evidence(early=Judgement(INCONCLUSIVE, text + ": no budget has two paired seeds"))
        return _Evidence(tests, every=True, text=text)
    curve = section.sweep_curve(rows[0].arm)
    speedups = [s for s in (section.speedups_of(curve, claim.unit) if curve else []) if s.verdict != "unknown"]
    if not speedups:
        return _Evidence(
            early=Judgement(
                INCONCLUSIVE, f"no judged speedup at matched accuracy in {COSTS[claim.unit]} (needs 2 seeds)"
            )
        )
    text = f"{on}speedup at matched accuracy ({COSTS[claim.unit]}): " + "; ".join(
        f"{s.budget} {s.format()}" for s in speedups
    )
    if timed and (floor is None or floor.factor is None or claim.size < floor.factor):
        return _Evidence(early=Judgement(INCONCLUSIVE, text + _below_floor(claim, floor)))
    tests = []
    for s in speedups:
        lows, highs = [b[0] for b in s.seed_logs], [b[1] for b in s.seed_logs]
        log_size = float(np.log(claim.size))
        p_short = t_p_values(lows, highs, null=log_size, margins=s.seed_margins)[1] if claim.size > 1 else None
        p_up, p_down = (1.0 if p is None else p for p in (s.p_up, s.p_down))
        tests.append(_Test(f"{s.budget}", p_up, p_down, p_short))
    return _Evidence(tests, text=text)


def _below_floor(claim: Claim, floor: NoiseFloor | None) -> str:
    if floor is None:  # seeds' spread is not all of timing's noise: a drift over a grid moves every seed alike
        return (
            ": this study has no identity arm (e.g. Scale Schedule at ratio 0.5 beside the baseline's half budgets), "
            "so how much identical runs differ in time here is unknown"
        )
    if floor.factor is None:
        return (
            f": this study's identity arm ran on another machine than its baseline ({floor.machines}), so how much "
            "identical runs differ in time on one machine is unknown"
        )
    claimed = f"the claimed {claim.size:g}x" if claim.size > 1 else "any speed-up"
    return f": {claimed} is below this study's timing noise floor ({floor.factor:.2f}x between identical runs)"


def _decide(evidence: _Evidence, adjusted: Mapping[tuple[int, str], float], size: float, family: str) -> Judgement:
    """The verdict from the Holm-adjusted p-values of the evidence's tests (`adjusted[(test index, kind)]`)."""
    agree, against = [], []
    for i, test in enumerate(evidence.tests):
        significant = adjusted[(i, "none")] < ALPHA
        up, down = significant and test.p_up <= test.p_down, significant and test.p_down < test.p_up
        short = test.p_short is not None and adjusted[(i, "short")] < ALPHA
        agree.append(up and not short)
        against.append(down or short)
    short_note = f" (below the claimed {size:g}x)" if size > 1 else ""
    if evidence.every:
        consistent, contradicts = all(agree), any(against)
    else:
        consistent, contradicts = any(agree) and not any(against), any(against) and not any(agree)
    least = min(min(adjusted[(i, "none")] for i in range(len(evidence.tests))), 1.0)
    text = f"{evidence.text}; Holm-adjusted p = {least:.2g} ({family})"
    if consistent:
        return Judgement(CONSISTENT, text, family)
    if contradicts:
        below = short_note if any(t.p_short is not None for t in evidence.tests) else ""
        return Judgement(CONTRADICTS, text + below, family)
    return Judgement(INCONCLUSIVE, text + ": the interval is too wide to tell", family)


def judge_claims(claims: Mapping[str, Sequence[Claim]], section: Section) -> dict[tuple[str, int], Judgement]:
    """The verdict of every claim (`claims`: method -> its card's claims) on one study section, keyed by
    (method, index). The comparisons of all of them are one family, Holm-adjusted together."""
    study = study_conditions(section)
    evidence = {
        (method, i): _evidence(claim, section, method, study)
        for method, listed in claims.items()
        for i, claim in enumerate(listed)
    }
    keys, p_values = [], []
    for key, found in evidence.items():
        if found.early is None:
            for i, test in enumerate(found.tests):
                keys.append((key, i, "none"))
                p_values.append(test.p_none)
                if test.p_short is not None:
                    keys.append((key, i, "short"))
                    p_values.append(test.p_short)
    adjusted = dict(zip(keys, holm(p_values)))
    claims_tested = len({key for key, _, _ in keys})
    family = f"Holm over {_count(len(p_values), 'test')} of {_count(claims_tested, 'claim')} in `{section.name}`"
    verdicts = {}
    for key, found in evidence.items():
        if found.early is not None:
            verdicts[key] = found.early
            continue
        mine = {(i, kind): p for (k, i, kind), p in adjusted.items() if k == key}
        verdicts[key] = _decide(found, mine, claims[key[0]][key[1]].size, family)
    return verdicts


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def judge(claim: Claim, section: Section, method: str) -> Judgement:
    """The verdict of one claim on one study section, alone (a family of one: no correction)."""
    return judge_claims({method: [claim]}, section)[(method, 0)]


def claim_table(
    claims: Sequence[Claim],
    sections: Sequence[Section],
    method: str,
    level: str = "###",
    judgements: Mapping[str, Mapping[tuple[str, int], Judgement]] | None = None,
) -> str:
    """The card's claim table: one verdict column per study section that ran the method alone (or one column
    saying that none did). `judgements` (section name -> `judge_claims` of every card on it) carries the
    verdicts of the study's whole family; without it the card's claims are their own family."""
    if not claims:
        return ""
    sections = [s for s in sections if any(r.methods == [method] and not r.cyclic for r in s.summaries)]
    head = (
        ["claim", "source", "expects", *(f"`{s.name}`" for s in sections)]
        if sections
        else ["claim", "source", "expects", "verdict"]
    )
    lines = [
        f"{level} Claims",
        "",
        "What the method's authors or Composer report, each judged on the method's own arm "
        f"(`cadence_harness.reading.claims`): {', '.join(f'*{v}*' for v in VERDICTS)}. Consistent needs the "
        "95% interval to exclude no effect and keep the claimed factor; the claims of all cards on a study are one "
        "family, Holm-corrected. A FLOPs claim that holds by design is labelled *by construction*.",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] * len(head)) + " |",
    ]
    given = judgements or {s.name: judge_claims({method: claims}, s) for s in sections}
    for index, claim in enumerate(claims):
        expects = claim.expects + ("" if claim.unit == "flops" or claim.expects == "accuracy" else f" ({claim.unit})")
        cells = []
        for section in sections:
            judgement = given[section.name][(method, index)]
            cells.append(f"**{judgement.verdict}**: {judgement.reason}")
        if not sections:
            cells.append(f"**{NOT_TESTABLE}**: {claim.not_here or 'no study measured the method alone'}")
        text = claim.claim + (f" (at {settings_text(claim.settings)})" if claim.settings else "")
        lines.append("| " + " | ".join([text, claim.source, expects, *cells]) + " |")
    return "\n".join(lines) + "\n"
