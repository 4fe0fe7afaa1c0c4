"""The regime of a study, said first: what was trained, on how much, for how long, and how far its baseline
is from what the model usually reaches.

A card's verdicts are about the study's regime, which may be far from where a claim was made (a
ResNet-20 trained for 625 steps on 5,000 images is not ImageNet for 90 epochs). Each card's Results
therefore opens with it, read from the run records (params and evals) alone, and with the usual
figure for the model where one is published (`USUAL`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cadence_harness.reading.summaries import Section
from cadence_harness.records import budget_value

__all__ = ["USUAL", "Usual", "regime"]


@dataclass(frozen=True)
class Usual:
    """The accuracy a model usually reaches on a data set, and where that figure comes from."""

    accuracy: float
    source: str


# (model, data) -> the published figure for the stock model on the whole data set
USUAL: dict[tuple[str, str], Usual] = {
    ("tv/resnet20", "cifar10"): Usual(
        0.9125, "ResNet-20 on all 50,000 CIFAR-10 images for 64k steps: 8.75% error (He et al., CVPR 2016)"
    ),
    ("hf/bert-tiny", "sst2"): Usual(0.832, "BERT-Tiny fine-tuned on all of SST-2: 83.2% dev (Turc et al., 2019)"),
}
FAR = 0.05  # a baseline this far below the usual figure (absolute) is "far from where claims were made"


def _one(section: Section, key: str) -> str:
    values = {r.params.get(key, "None") for r in section.records}
    return next(iter(values)) if len(values) == 1 else "/".join(sorted(values))


def regime(section: Section) -> str:
    """Two or three sentences: the model, data, budgets (with the longest run's optimizer steps), seeds, the
    baseline's accuracy at its longest budget against the usual figure, and whether the study is far from it."""
    model, data, subset = _one(section, "model"), _one(section, "data"), _one(section, "subset")
    variant = sorted(
        {
            f"{k.removeprefix('model_kwargs.')}={v}"
            for r in section.records
            for k, v in r.params.items()
            if k.startswith("model_kwargs.")
        }
    )
    base = sorted(
        (s for s in section.summaries if s.arm == "baseline" and not s.cyclic and s.budget),
        key=lambda s: budget_value(s.budget),
    )
    steps = max((int(e.get("step", 0)) for r in section.records for e in r.evals), default=0)
    samples = "texts" if model.startswith("hf/") else "images"
    data_text = data + (f" (first {int(subset):,} training {samples})" if subset.isdigit() else "")
    budgets = ", ".join(s.budget for s in base) or "(no baseline)"
    seeds = max((s.n for s in base), default=0)
    text = (
        f"**Regime.** {model}{' (' + ', '.join(variant) + ')' if variant else ''} on {data_text}; budgets {budgets} "
        f"(the longest run takes {steps:,} optimizer steps); {seeds} seeds per arm."
    )
    if not base:
        return text
    last = base[-1]
    what = "next-token accuracy " if _one(section, "task") == "causal_lm" else ""
    text += f" The baseline reaches {what}{last.accuracy.format(scale=100)} % at {last.budget} (n={last.n})"
    usual = USUAL.get((model, data))
    if usual is None:
        text += "; no published figure for this model and data to set it against."
    else:
        text += f", against about {usual.accuracy:.1%} usually ({usual.source}"
        text += "; for the stock model: this is a variant)." if variant else ")."
    if subset.isdigit() or (usual is not None and last.accuracy.mean < usual.accuracy - FAR):
        text += (
            " **This study is far from where the claims below were made** (a short run on a subset"
            + (
                ", well below the usual accuracy"
                if usual is not None and last.accuracy.mean < usual.accuracy - FAR
                else ""
            )
            + "): each verdict is about this regime only."
        )
    return text
