"""Results in plain words: the one line that opens a card's or a study's results, and the hyperparameters each
arm ran with (paste-able commands: `cadence_harness.reading.commands`).

A reader first wants to know "should I use it, here, for what"; the tables that follow are the evidence. The
line is derived from what the tables already show, never from a new test: Δ accuracy against the baseline of
the same budget and speedups at matched accuracy (each better or worse only where its paired t-test's
Benjamini-Hochberg q-value over the study's cells of its kind is below 0.05), and the claims' verdicts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from cadence_harness.reading.claims import NOT_TESTABLE, VERDICTS, Claim, Judgement
from cadence_harness.reading.summaries import ArmSummary, Section
from cadence_harness.records import budget_value

__all__ = ["hyperparameters", "in_short", "study_in_short"]

PLUMBING = {"input_key", "target_key", "seed", "strict"}  # which batch entry, which RNG: not a hyperparameter


# Hyperparameters --------------------------------------------------------------------------------
def _arguments(text: str) -> dict[str, str]:
    """``Name(a=1, b='x')`` -> ``{'a': '1', 'b': 'x'}``: the top-level keyword arguments of a method's repr."""
    match = re.match(r"^\w+\((.*)\)$", text.strip(), re.S)
    if not match:
        return {}
    found, depth, quote, current = {}, 0, "", ""
    for char in match.group(1) + ",":
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            key, _, value = current.strip().partition("=")
            if key and value:
                found[key.strip()] = value.strip().strip("'\"")
            current = ""
            continue
        current += char
    return found


def method_settings(params: Mapping[str, str], method: str) -> dict[str, str]:
    """The hyperparameters `method` ran with, from a record's params: its repr (``method.<name>``) and the keys
    set explicitly (``method.<name>.<key>``), without the batch plumbing."""
    found = _arguments(params.get(f"method.{method}", ""))
    prefix = f"method.{method}."
    found.update({k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)})
    return {k: v for k, v in found.items() if k not in PLUMBING}


def hyperparameters(rows: Iterable[ArmSummary], names: Mapping[str, str] | None = None) -> str:
    """One sentence per method of the rows' arms: ``MixUp ran with alpha 0.2, interpolate_loss False.``
    Values that differ between arms or budgets are joined with ``/``."""
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        for method in row.methods:
            values[method]  # a method that ran with nothing to set is still named
            for key, value in method_settings(row.params, method).items():
                values[method][key].add(value)
    if not values:
        return ""
    names = names or {}
    sentences = []
    for method in sorted(values):
        settings = ", ".join(f"{k} {'/'.join(sorted(v))}" for k, v in values[method].items())
        sentences.append(f"{names.get(method, method)} ran with {settings or 'its defaults'}.")
    return "**Hyperparameters.** " + " ".join(sentences)


# The line in plain words --------------------------------------------------------------------------
def _one(section: Section, key: str) -> str:
    return "/".join(sorted({r.params.get(key, "None") for r in section.records}))


def where(section: Section) -> str:
    """``tv/resnet20 on cifar10 (first 5,000 examples) at budgets 2ep to 16ep``."""
    subset = _one(section, "subset")
    budgets = sorted({s.budget for s in section.summaries if s.budget and not s.cyclic}, key=budget_value)
    text = f"{_one(section, 'model')} on {_one(section, 'data')}"
    text += f" (first {int(subset):,} training examples)" if subset.isdigit() else ""
    if budgets:
        text += f" at budget {budgets[0]}" if len(budgets) == 1 else f" at budgets {budgets[0]} to {budgets[-1]}"
    return text


def effects(section: Section, arm: str) -> tuple[list[str], list[str]]:
    """What the arm measurably gains and loses against the baseline: accuracy at the same budget and FLOPs and
    time to the same accuracy, each where the study's Benjamini-Hochberg q-value is below 0.05; with budgets."""
    gains, losses = [], []
    rows = [s for s in section.summaries if s.arm == arm and not s.cyclic and s.accuracy_delta is not None]
    shifts = [
        (s.budget, s.accuracy_delta.mean)
        for s in rows
        if s.accuracy_delta is not None and s.accuracy_q is not None and s.accuracy_q < 0.05
    ]
    up = [budget for budget, shift in shifts if shift > 0]
    down = [budget for budget, shift in shifts if shift < 0]
    if up:
        gains.append(f"more accurate at {', '.join(up)}")
    if down:
        losses.append(f"less accurate at {', '.join(down)}")
    identity = section.noise_floor is not None and arm in section.noise_floor.arms
    curve = section.sweep_curve(arm)
    for unit, words in (("flops", "FLOPs"), ("train_s", "training time")):
        if curve is not None and section.has_tradeoff and not (identity and unit == "train_s"):
            speedups = section.speedups_of(curve, unit)
            better = [s.budget for s in speedups if s.verdict == "better"]
            worse = [s.budget for s in speedups if s.verdict == "worse"]
        else:  # no curve: the ratio of the same budget's costs, by its q-value
            found = [s for s in rows if s.ratio_q.get(unit, 1.0) < 0.05 and not identity]
            ratios = [(s.budget, s.speedup if unit == "train_s" else s.flops_ratio) for s in found]
            better = [b for b, r in ratios if r is not None and r.mean > 1]
            worse = [b for b, r in ratios if r is not None and r.mean < 1]
        if better:
            gains.append(f"less {words} at {', '.join(better)}")
        if worse:
            losses.append(f"more {words} at {', '.join(worse)}")
    return gains, losses


def _advice(gains: Sequence[str], losses: Sequence[str]) -> str:
    if gains and losses:
        return f"a trade-off: {'; '.join(gains)}, but {'; '.join(losses)}"
    if gains:
        return f"worth trying: {'; '.join(gains)}, and no measurable loss"
    if losses:
        return f"not worth it: {'; '.join(losses)}, and no measurable gain"
    return "no measurable gain (or loss) in accuracy, FLOPs or time"


def _claims(claims: Sequence[Claim], method: str, judged: Mapping[tuple[str, int], Judgement]) -> str:
    if not claims:
        return "its card makes no claim to test"
    verdicts = [judged[(method, i)].verdict if (method, i) in judged else NOT_TESTABLE for i in range(len(claims))]
    counts = [f"{verdicts.count(v)} {v}" for v in (*VERDICTS, "by construction") if verdicts.count(v)]
    noun = "claim" if len(claims) == 1 else "claims"
    return f"its {len(claims)} {noun}: {', '.join(counts)} (see Claims)"


def in_short(
    method: str,
    name: str,
    sections: Sequence[Section],
    claims: Sequence[Claim] = (),
    judgements: Mapping[str, Mapping[tuple[str, int], Judgement]] | None = None,
) -> str:
    """The card's first line: on each study, what the method alone measurably gained or lost, then its claims."""
    parts = []
    for section in sections:
        alone = [s for s in section.summaries if s.methods == [method]]
        combined = sorted({s.arm for s in section.summaries if method in s.methods and s.methods != [method]})
        if not alone and not combined:
            continue
        if alone:
            n = min(s.n for s in alone)
            seeds = f"{n} seed{'s' if n != 1 else ''} per budget"
            text = f"{name} alone ({seeds}): {_advice(*effects(section, method))}"
        else:
            text = f"measured only in combination ({', '.join(combined)}): see the tables"
        judged = (judgements or {}).get(section.name, {})
        parts.append(f"On {where(section)}, {text}; {_claims(claims, method, judged)}.")
    return "**In short.** " + " ".join(parts) if parts else ""


def study_in_short(section: Section) -> str:
    """A study's first line: which methods, each alone, measurably gained or lost anything here."""
    alone = sorted({s.arm for s in section.summaries if len(s.methods) == 1})
    if not alone:
        return f"**In short.** On {where(section)}, no method was measured alone."
    helped: list[str] = []
    hurt: list[str] = []
    mixed: list[str] = []
    for arm in alone:
        gains, losses = effects(section, arm)
        (mixed if gains and losses else helped if gains else hurt if losses else []).append(arm)
    quiet = len(alone) - len(helped) - len(hurt) - len(mixed)
    found = [
        f"measurably better: {', '.join(helped)}" if helped else "",
        f"measurably worse: {', '.join(hurt)}" if hurt else "",
        f"a trade-off (better in one way, worse in another): {', '.join(mixed)}" if mixed else "",
        f"no measurable gain or loss: {quiet} of the {len(alone)} methods measured alone" if quiet else "",
    ]
    return (
        f"**In short.** On {where(section)}, each method alone against the baseline: "
        + "; ".join(f for f in found if f)
        + " (accuracy at the same budget, FLOPs and training time to the same accuracy; details below)."
    )
