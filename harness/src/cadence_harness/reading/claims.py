"""The claim table of a method card: what the method's authors or Composer report, judged on a study.

A card lists its claims in its front matter, each with what it expects of the method alone:

    claims:
      - claim: "+0.5-1% top-1 on ImageNet for a few percent more compute"
        source: "Zhang, ICML 2019; Composer's card"
        expects: accuracy     # more accurate than the baseline at the same budget
      - claim: "the same accuracy in fewer GPU hours"
        source: "Composer's card"
        expects: speedup      # reaches the baseline's accuracy for less cost (matched accuracy)
        unit: train_s         # which cost: flops (the default), train_s or cpu_s
      - claim: "2x faster on A100 tensor cores"
        source: "..."
        expects: speedup
        not_here: "tensor cores: this study runs on a CPU"   # then: not applicable at this scale
      - claim: "1.5x faster time-to-train"
        source: "..."
        expects: speedup
        size: 1.5             # the claimed factor: the interval must lie above it, not only above 1

A claim is judged on the method's own arm of each study section:

* ``accuracy``: the paired Δ accuracy against the baseline at the longest budget the arm has;
  reproduced when its 95% interval lies above 0.
* ``speedup``: the speedup at matched accuracy at each budget (`cadence_harness.reading.tradeoff`);
  reproduced when some budget's interval lies above 1 and none below.
* ``cost``: the baseline's cost over the arm's at the same budget (FLOPs, or time with `unit`);
  reproduced when its interval lies above 1 at every budget.

A speedup or cost claim that states a factor gives it as ``size``: then the interval must lie above
the factor, and one that lies above 1 only is *not reproduced*, "faster, but not by the claimed 1.5x".

Anything else is *not reproduced*, and the reason gives the numbers (within noise, or worse). A
claim with `not_here`, or a method the section did not measure, is *not applicable at this scale*.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cadence_harness.reading.summaries import ArmSummary, Section
from cadence_harness.reading.tradeoff import COSTS
from cadence_harness.records import budget_value

__all__ = ["Claim", "Judgement", "claim_table", "judge", "parse_claims"]

EXPECTS = ("accuracy", "speedup", "cost")
REPRODUCED, NOT_REPRODUCED, NOT_APPLICABLE = "reproduced", "not reproduced", "not applicable at this scale"


@dataclass(frozen=True)
class Claim:
    claim: str
    source: str
    expects: str
    unit: str = "flops"
    not_here: str = ""
    size: float = 1.0  # the factor a speedup or cost claim states (1: any speed-up)


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str


def parse_claims(front: Mapping[str, Any], where: str) -> list[Claim]:
    """The `claims` of a card's front matter, checked: a card with a malformed claim fails loudly."""
    claims = front.get("claims") or []
    if not isinstance(claims, list):
        raise ValueError(f"{where}: `claims` must be a list of mappings, got {type(claims).__name__}")
    parsed = []
    for index, entry in enumerate(claims):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: claims[{index}] must be a mapping with claim, source and expects")
        unknown = sorted(set(entry) - {"claim", "source", "expects", "unit", "not_here", "size"})
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
        not_here = entry.get("not_here", "")
        parsed.append(Claim(str(entry["claim"]), str(entry["source"]), entry["expects"], unit, not_here, float(size)))
    return parsed


def _own(section: Section, method: str) -> list[ArmSummary]:
    """The method's own arm (alone, no combination), budget by budget, shortest first."""
    rows = [s for s in section.summaries if s.methods == [method] and not s.cyclic]
    return sorted(rows, key=lambda s: budget_value(s.budget) if s.budget else 0.0)


def _above(low: float | None, threshold: float) -> bool:
    return low is not None and low > threshold


def _below(high: float | None, threshold: float) -> bool:
    return high is not None and high < threshold


def judge(claim: Claim, section: Section, method: str) -> Judgement:
    """The verdict of one claim on one study section, with its reason."""
    if claim.not_here:
        return Judgement(NOT_APPLICABLE, claim.not_here)
    rows = _own(section, method)
    if not rows:
        return Judgement(NOT_APPLICABLE, f"`{section.name}` has no arm with {method} alone")
    if claim.expects == "accuracy":
        last = rows[-1]
        delta = last.accuracy_delta
        if delta is None or delta.low is None:
            return Judgement(NOT_REPRODUCED, f"no paired interval at {last.budget_label} (n={last.n})")
        text = f"Δ accuracy at {last.budget_label} {delta.format(scale=100)} pp (n={last.n})"
        if _above(delta.low, 0):
            return Judgement(REPRODUCED, text)
        return Judgement(NOT_REPRODUCED, text + (": worse" if _below(delta.high, 0) else ": within noise"))
    if claim.expects == "cost":
        ratios = [(s.budget_label, s.flops_ratio if claim.unit == "flops" else s.speedup) for s in rows]
        text = f"{COSTS[claim.unit]} ratio " + ", ".join(
            f"{label} {r.format(digits=2, suffix='x') if r else 'n/a'}" for label, r in ratios
        )
        if all(r is not None and _above(r.low, claim.size) for _, r in ratios):
            return Judgement(REPRODUCED, text)
        if all(r is not None and _above(r.low, 1) for _, r in ratios):
            return Judgement(NOT_REPRODUCED, text + f": cheaper, but not by the claimed {claim.size:g}x")
        return Judgement(NOT_REPRODUCED, text)
    curve = section.sweep_curve(method)
    speedups = section.speedups_of(curve, claim.unit) if curve else []
    judged = [s for s in speedups if s.verdict != "unknown"]
    if not judged:
        return Judgement(NOT_REPRODUCED, f"no speedup at matched accuracy in {COSTS[claim.unit]} (needs 2 seeds)")
    text = f"speedup at matched accuracy ({COSTS[claim.unit]}): " + "; ".join(
        f"{s.budget} {s.format()}" for s in judged
    )
    better = [s for s in judged if s.verdict == "better"]
    worse = [s for s in judged if s.verdict == "worse"]
    if better and not worse and any(_above(s.low, claim.size) for s in better):
        return Judgement(REPRODUCED, text)
    if better and not worse:
        return Judgement(NOT_REPRODUCED, text + f": faster, but not by the claimed {claim.size:g}x")
    return Judgement(NOT_REPRODUCED, text)


def claim_table(claims: Sequence[Claim], sections: Sequence[Section], method: str, level: str = "###") -> str:
    """The card's claim table: one verdict column per study section that ran the method alone (or one
    column saying that none did)."""
    if not claims:
        return ""
    sections = [s for s in sections if _own(s, method)]
    head = (
        ["claim", "source", "expects", *(f"`{s.name}`" for s in sections)]
        if sections
        else ["claim", "source", "expects", "verdict"]
    )
    lines = [
        f"{level} Claims",
        "",
        "What the method's authors or Composer report, each judged on the method's own arm "
        "(`cadence_harness.reading.claims`): reproduced only where the 95% interval supports it.",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] * len(head)) + " |",
    ]
    for claim in claims:
        expects = claim.expects + ("" if claim.unit == "flops" or claim.expects == "accuracy" else f" ({claim.unit})")
        cells = []
        for section in sections:
            judgement = judge(claim, section, method)
            cells.append(f"**{judgement.verdict}**: {judgement.reason}")
        if not sections:
            cells.append(f"**{NOT_APPLICABLE}**: {claim.not_here or 'no study measured the method alone'}")
        lines.append("| " + " | ".join([claim.claim, claim.source, expects, *cells]) + " |")
    return "\n".join(lines) + "\n"
