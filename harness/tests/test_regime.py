"""Each card's Results open with the study's regime, read from the run records: model, data, budgets and steps,
seeds, the baseline against the usual figure for the model, and a plain warning when the study is far from it."""

from __future__ import annotations

from cadence_harness.reading.regime import regime
from cadence_harness.reading.summaries import sections_of
from cadence_harness.records import RunRecord
from cadence_harness.testing import study_run


def _run(budget: str, seed: int, accuracy: float, steps: int, subset: str = "5000") -> RunRecord:
    params = {"model": "tv/resnet20", "data": "cifar10", "subset": subset}
    return study_run(
        "baseline", budget, seed, accuracy=accuracy, train_s=float(steps), params=params,
        metrics={"final/flops": 1e12 * steps}, evals=[{"step": steps, "accuracy": accuracy}],
    )  # fmt: skip


def test_the_regime_names_the_run_and_the_usual_figure_and_says_when_it_is_far() -> None:
    runs = [_run(b, s, a + s / 100, n) for b, a, n in [("2ep", 0.40, 78), ("16ep", 0.65, 624)] for s in range(3)]
    (section,) = sections_of(runs)
    text = regime(section)
    assert text.startswith("**Regime.** tv/resnet20 on cifar10 (first 5,000 training images); budgets 2ep, 16ep")
    assert "(the longest run takes 624 optimizer steps); 3 seeds per arm" in text
    assert "The baseline reaches 66.00 ± 2.48 % at 16ep (n=3), against about 91.2% usually" in text
    assert "**This study is far from where the claims below were made**" in text and "well below" in text


def test_a_study_near_the_usual_figure_is_not_called_far() -> None:
    runs = [_run("200ep", s, 0.91 + s / 1000, 78_000, subset="None") for s in range(3)]
    (section,) = sections_of(runs)
    text = regime(section)
    assert "on cifar10;" in text and "against about 91.2% usually" in text and "far from" not in text
